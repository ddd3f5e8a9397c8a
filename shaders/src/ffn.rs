//! The CubeCL kernels of the kept tokens' FFN: compaction, first layer + GELU, second layer +
//! scaled residual add.

use burn::backend::cubecl::dtype_to_storage_type;
use burn::tensor::{DType, Shape};
use burn_cubecl::cubecl;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{CubeBackend, kernel::into_contiguous};
use cubecl::prelude::*;
use cubecl::{CubeCount, CubeDim, calculate_cube_count_elemwise};

use crate::SparseFfnOps;

/// Threads of the compaction's single cube (within WebGPU's 256-invocation limit).
const SCAN: usize = 256;

/// One cube scans `scale` [n] in blocks of `SCAN`: `slot[i]` is 1 + the compacted position of
/// row i if it runs (`scale > 0`), else 0; `rows[r]` the row at compacted position r;
/// `count[0]` how many run. Order-preserving (a Hillis–Steele scan per block; no subgroup ops,
/// which the browser's WGSL validation refuses).
#[cube(launch)]
fn compact_kernel<F: Float>(
    scale: &Tensor<F>,
    slot: &mut Tensor<u32>,
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
        if i < n {
            if flag == 1u32 {
                let r = total + scan[tid] - 1u32;
                slot[i] = r + 1u32;
                rows[r as usize] = i as u32;
            } else {
                slot[i] = 0u32;
            }
        }
        total += scan[block - 1];
        sync_cube();
        base += block;
    }
    if tid == 0 {
        count[0] = total;
    }
}

/// `hidden[r, j] = gelu(b1[j] + Σ_i x[rows[r], i] · w1[i, j])` for the `count` compacted rows;
/// the threads of the other rows exit at once.
#[cube(launch)]
fn hidden_kernel<F: Float>(
    x: &Tensor<F>,
    rows: &Tensor<u32>,
    count: &Tensor<u32>,
    w1: &Tensor<F>,
    b1: &Tensor<F>,
    hidden: &mut Tensor<F>,
    #[define(F)] _dtype: ElemType,
) {
    let (d, d_ff) = (w1.shape(0), w1.shape(1));
    let r = ABSOLUTE_POS / d_ff;
    let j = ABSOLUTE_POS % d_ff;
    if r >= count[0] as usize {
        terminate!();
    }
    let row = rows[r] as usize;
    let mut acc = b1[j * b1.stride(0)];
    for i in 0..d {
        acc += x[row * x.stride(0) + i * x.stride(1)] * w1[i * w1.stride(0) + j * w1.stride(1)];
    }
    // Exact GELU, as the model's: x/2 · (1 + erf(x/√2)).
    let erf = F::erf(acc * F::new(std::f32::consts::FRAC_1_SQRT_2));
    hidden[r * d_ff + j] = acc * F::new(0.5) * (F::new(1.0) + erf);
}

/// `out[row, c] = h[row, c] + scale[row] · (b2[c] + Σ_j hidden[slot[row] − 1, j] · w2[j, c])`
/// for the rows that run, `h[row, c]` for the others.
#[cube(launch)]
fn output_kernel<F: Float>(
    h: &Tensor<F>,
    scale: &Tensor<F>,
    slot: &Tensor<u32>,
    hidden: &Tensor<F>,
    w2: &Tensor<F>,
    b2: &Tensor<F>,
    out: &mut Tensor<F>,
    #[define(F)] _dtype: ElemType,
) {
    let (d_ff, d) = (w2.shape(0), w2.shape(1));
    let row = ABSOLUTE_POS / d;
    let c = ABSOLUTE_POS % d;
    if row >= h.shape(0) {
        terminate!();
    }
    let base = h[row * h.stride(0) + c * h.stride(1)];
    let s = slot[row];
    if s == 0u32 {
        out[ABSOLUTE_POS] = base;
    } else {
        let r = (s - 1u32) as usize;
        let mut acc = b2[c * b2.stride(0)];
        for j in 0..d_ff {
            acc += hidden[r * d_ff + j] * w2[j * w2.stride(0) + c * w2.stride(1)];
        }
        out[ABSOLUTE_POS] = base + scale[row * scale.stride(0)] * acc;
    }
}

impl SparseFfnOps for CubeBackend {
    fn sparse_ffn_add(
        h: CubeTensor,
        x: CubeTensor,
        scale: CubeTensor,
        w1: CubeTensor,
        b1: CubeTensor,
        w2: CubeTensor,
        b2: CubeTensor,
    ) -> CubeTensor {
        let (client, device, dtype) = (h.client.clone(), h.device.clone(), h.dtype);
        let [n, d] = h.meta.shape().dims::<2>();
        let d_ff = w1.meta.shape().dims::<2>()[1];
        let float = [dtype_to_storage_type(dtype)];
        let new = |shape: Vec<usize>, dtype: DType| {
            empty_device_contiguous_dtype(client.clone(), device.clone(), Shape::from(shape), dtype)
        };
        let (slot, rows, count) = (
            new(vec![n], DType::U32),
            new(vec![n], DType::U32),
            new(vec![1], DType::U32),
        );
        let scale = into_contiguous(scale);
        compact_kernel::launch(
            &client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(SCAN as u32),
            scale.clone().into_tensor_arg(),
            slot.clone().into_tensor_arg(),
            rows.clone().into_tensor_arg(),
            count.clone().into_tensor_arg(),
            SCAN,
            float[0],
        );

        let hidden = new(vec![n, d_ff], dtype);
        let threads = n * d_ff;
        let cube_dim = CubeDim::new(&client, threads);
        hidden_kernel::launch(
            &client,
            calculate_cube_count_elemwise(&client, threads, cube_dim),
            cube_dim,
            x.into_tensor_arg(),
            rows.into_tensor_arg(),
            count.into_tensor_arg(),
            w1.into_tensor_arg(),
            b1.into_tensor_arg(),
            hidden.clone().into_tensor_arg(),
            float[0],
        );

        let out = new(vec![n, d], dtype);
        let threads = n * d;
        let cube_dim = CubeDim::new(&client, threads);
        output_kernel::launch(
            &client,
            calculate_cube_count_elemwise(&client, threads, cube_dim),
            cube_dim,
            h.into_tensor_arg(),
            scale.into_tensor_arg(),
            slot.into_tensor_arg(),
            hidden.into_tensor_arg(),
            w2.into_tensor_arg(),
            b2.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            float[0],
        );
        out
    }
}
