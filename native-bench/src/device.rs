//! Picks the device: a real GPU through wgpu when there is one, else the flex CPU backend.

use anyhow::{Result, bail};
use burn::tensor::{Device, DeviceType};
use clap::ValueEnum;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeviceChoice {
    /// A hardware wgpu adapter if present (software rasterisers don't count), else the CPU.
    Auto,
    /// The flex CPU backend (multi-threaded, SIMD).
    Cpu,
    /// The first wgpu adapter, even a software one.
    Wgpu,
    /// The first NVIDIA GPU through Burn's CUDA backend (built with `--features cuda`).
    #[cfg(feature = "cuda")]
    Cuda,
}

/// Adapters that are CPUs in disguise: slower than flex for this work.
const SOFTWARE: [&str; 3] = ["llvmpipe", "lavapipe", "swiftshader"];

pub struct Chosen {
    pub device: Device,
    /// What it is, for the report: "wgpu: NVIDIA H200" or "cpu: flex (2 threads)".
    pub name: String,
}

fn wgpu_adapters() -> Vec<(Device, String)> {
    Device::enumerate(DeviceType::Wgpu)
        .into_vec()
        .into_iter()
        .map(|d| {
            let name = d
                .identity()
                .map(|i| i.name)
                .unwrap_or_else(|| "unknown adapter".into());
            (d, name)
        })
        .collect()
}

pub fn choose(choice: DeviceChoice) -> Result<Chosen> {
    let cpu = || Chosen {
        device: Device::flex(),
        name: format!(
            "cpu: flex ({} threads)",
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        ),
    };
    match choice {
        DeviceChoice::Cpu => Ok(cpu()),
        DeviceChoice::Wgpu => match wgpu_adapters().into_iter().next() {
            Some((device, name)) => Ok(Chosen {
                device,
                name: format!("wgpu: {name}"),
            }),
            None => bail!(
                "no wgpu adapter found (on Linux without a GPU: apt-get install mesa-vulkan-drivers)"
            ),
        },
        #[cfg(feature = "cuda")]
        DeviceChoice::Cuda => {
            // A machine without the driver library must be an error, not a panic.
            let found = std::panic::catch_unwind(|| Device::enumerate(DeviceType::Cuda).into_vec())
                .unwrap_or_default();
            match found.into_iter().next() {
                Some(device) => {
                    let name = device
                        .identity()
                        .map(|i| i.name)
                        .unwrap_or_else(|| "NVIDIA GPU".into());
                    Ok(Chosen {
                        device,
                        name: format!("cuda: {name}"),
                    })
                }
                None => {
                    bail!("no CUDA device found (needs an NVIDIA GPU and its driver's libcuda)")
                }
            }
        }
        DeviceChoice::Auto => Ok(wgpu_adapters()
            .into_iter()
            .find(|(_, name)| !SOFTWARE.iter().any(|s| name.to_lowercase().contains(s)))
            .map(|(device, name)| Chosen {
                device,
                name: format!("wgpu: {name}"),
            })
            .unwrap_or_else(cpu)),
    }
}
