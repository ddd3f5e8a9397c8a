//! Running wgpu work in a child process. Mesa's lavapipe segfaults while a process tears down,
//! after the work is done and checked; so a test re-runs itself (this same test binary) as a
//! child with `CHILD_ENV` set, the child prints `RESULT x y …` (or `SKIPPED` without an adapter),
//! and the parent judges those numbers, not the child's exit status.

use burn::tensor::{Device, DeviceType};

pub const CHILD_ENV: &str = "TSA_WGPU_CHILD";

/// Whether this process is the child.
pub fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// The first wgpu adapter, or `None` after printing `SKIPPED` (in the child).
pub fn wgpu_device() -> Option<Device> {
    let device = Device::enumerate(DeviceType::Wgpu)
        .into_vec()
        .into_iter()
        .next();
    if device.is_none() {
        println!("SKIPPED");
    }
    device
}

/// Prints the child's result line.
pub fn report(values: &[f32]) {
    let all: Vec<String> = values.iter().map(|v| v.to_string()).collect();
    println!("RESULT {}", all.join(" "));
    use std::io::Write;
    std::io::stdout().flush().ok();
}

/// Runs the test `name` of this binary as a child and returns the numbers it reported, or `None`
/// (saying so) when it found no wgpu adapter.
pub fn run_child(name: &str) -> Option<Vec<f32>> {
    let exe = std::env::current_exe().expect("test binary path");
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .output()
        .expect("run the child test process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    if stdout.contains("SKIPPED") {
        println!("SKIPPED: no wgpu adapter (install mesa-vulkan-drivers for lavapipe)");
        return None;
    }
    // The harness may print "test … " on the same line before the child's output.
    let line = stdout
        .lines()
        .find_map(|l| l.find("RESULT").map(|i| &l[i..]))
        .unwrap_or_else(|| {
            panic!(
                "the wgpu child printed no result (status {:?}):\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
    println!("{line} (child exit status {:?})", out.status);
    Some(
        line.split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect(),
    )
}
