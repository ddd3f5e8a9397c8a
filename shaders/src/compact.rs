//! Compaction of the keep mask on the device: which rows run, in order, and how many — the
//! count stays on the device, so nothing is read back.

use burn::tensor::{DType, Shape};
use burn_cubecl::cubecl;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use cubecl::{CubeCount, CubeDim};

use burn::backend::cubecl::dtype_to_storage_type;

/// Threads of the compaction's single cube (within WebGPU's 256-invocation limit).
const SCAN: usize = 256;

/// One cube scans `scale` [n] in blocks of `SCAN`: `rows[r]` is the row at compacted position r
/// of those that run (`scale > 0`), in order; `count[0]` how many run. Order-preserving (a
/// Hillis–Steele scan per block; no subgroup ops, which the browser's WGSL validation refuses).
#[cube(launch)]
fn compact_kernel<F: Float>(
    scale: &Tensor<F>,
    rows: &mut Tensor<u32>,
    count: &mut Tensor<u32>,
    #[comptime] block: usize,
    #[define(F)] _dtype: ElemType,
) {
    let n = scale.shape(0);
    let tid = UNIT_POS_X as usize;
    let mut scan = Shared::<[u32]>::new_slice(block);
    let mut total = 0u32;
    let mut base = 0usize;
    while base < n {
        let i = base + tid;
        let mut flag = 0u32;
        // Two ifs, not `&&`: a kernel's `&&` need not short-circuit, and row i ≥ n is out of bounds.
        #[allow(clippy::collapsible_if)]
        if i < n {
            if scale[i * scale.stride(0)] > F::new(0.0) {
                flag = 1u32;
            }
        }
        scan[tid] = flag;
        sync_cube();
        let mut offset = 1usize;
        while offset < block {
            let mut v = 0u32;
            if tid >= offset {
                v = scan[tid - offset];
            }
            sync_cube();
            scan[tid] += v;
            sync_cube();
            offset *= 2;
        }
        if flag == 1u32 {
            rows[(total + scan[tid] - 1u32) as usize] = i as u32;
        }
        total += scan[block - 1];
        sync_cube();
        base += block;
    }
    if tid == 0 {
        count[0] = total;
    }
}

/// The rows that run and their count, both on the device.
pub struct Kept {
    pub rows: CubeTensor,
    pub count: CubeTensor,
}

/// Compacts `scale` [n]: the rows with `scale > 0`.
pub fn compact(scale: CubeTensor) -> Kept {
    let (client, device) = (scale.client.clone(), scale.device.clone());
    let n = scale.meta.shape().dims::<1>()[0];
    let float = dtype_to_storage_type(scale.dtype);
    let new = |len: usize| {
        empty_device_contiguous_dtype(
            client.clone(),
            device.clone(),
            Shape::from(vec![len]),
            DType::U32,
        )
    };
    let (rows, count) = (new(n), new(1));
    compact_kernel::launch(
        &client,
        CubeCount::Static(1, 1, 1),
        CubeDim::new_1d(SCAN as u32),
        into_contiguous(scale).into_tensor_arg(),
        rows.clone().into_tensor_arg(),
        count.clone().into_tensor_arg(),
        SCAN,
        float,
    );
    Kept { rows, count }
}
