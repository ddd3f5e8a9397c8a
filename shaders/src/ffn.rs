//! The CubeCL kernels of the kept tokens' FFN: compaction, first layer + GELU, second layer +
//! scaled residual add (16×16 output tiles through shared memory).

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

/// One cube scans `scale` [n] in blocks of `SCAN`: `rows[r]` is the row at compacted position r
/// of those that run (`scale > 0`), in order; `count[0]` how many run. Order-preserving (a Hillis–Steele scan per block; no subgroup ops,
/// which the browser's WGSL validation refuses).
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

/// Outputs per cube side in the FFN kernels: a 16×16 tile of outputs per cube (256 invocations,
/// WebGPU's limit), its operands staged through shared memory.
const TILE: usize = 16;

/// Σ_k a[a_row, k] · b[k, col] for k < `k_len`: the calling cube's 16×16 output tile, each
/// thread its own (a_row, col), operands staged tile by tile through shared memory. `a_ok` false
/// (a row past the count) contributes zeros. Every thread of the cube must call it (barriers).
#[cube]
fn tile_dot<F: Float>(
    a: &Tensor<F>,
    a_row: usize,
    a_ok: bool,
    b: &Tensor<F>,
    col: usize,
    k_len: usize,
) -> F {
    let ty = UNIT_POS_Y as usize;
    let tx = UNIT_POS_X as usize;
    let mut a_tile = Shared::<[F]>::new_slice(TILE * TILE);
    let mut b_tile = Shared::<[F]>::new_slice(TILE * TILE);
    let mut acc = F::new(0.0);
    let mut k0 = 0usize;
    while k0 < k_len {
        let mut av = F::new(0.0);
        if a_ok && k0 + tx < k_len {
            av = a[a_row * a.stride(0) + (k0 + tx) * a.stride(1)];
        }
        a_tile[ty * TILE + tx] = av;
        let mut bv = F::new(0.0);
        if k0 + ty < k_len && col < b.shape(1) {
            bv = b[(k0 + ty) * b.stride(0) + col * b.stride(1)];
        }
        b_tile[ty * TILE + tx] = bv;
        sync_cube();
        for kk in 0..TILE {
            acc += a_tile[ty * TILE + kk] * b_tile[kk * TILE + tx];
        }
        sync_cube();
        k0 += TILE;
    }
    acc
}

/// `hidden[r, j] = gelu(b1[j] + Σ_i x[rows[r], i] · w1[i, j])` for the `count` compacted rows;
/// the cubes whose rows all lie past the count exit at once.
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
    let d_ff = w1.shape(1);
    let kept = count[0] as usize;
    let first = CUBE_POS_Y as usize * TILE;
    if first >= kept {
        terminate!(); // the whole cube: its barriers stay uniform
    }
    let r = first + UNIT_POS_Y as usize;
    let j = CUBE_POS_X as usize * TILE + UNIT_POS_X as usize;
    let ok = r < kept;
    let mut row = 0usize;
    if ok {
        row = rows[r] as usize;
    }
    let acc = tile_dot::<F>(x, row, ok, w1, j, w1.shape(0));
    if ok && j < d_ff {
        let v = acc + b1[j * b1.stride(0)];
        // Exact GELU, as the model's: v/2 · (1 + erf(v/√2)).
        let erf = F::erf(v * F::new(std::f32::consts::FRAC_1_SQRT_2));
        hidden[r * d_ff + j] = v * F::new(0.5) * (F::new(1.0) + erf);
    }
}

/// `out = h`, element by element (the halted rows' result; the kept rows are overwritten next).
#[cube(launch)]
fn copy_kernel<F: Float>(h: &Tensor<F>, out: &mut Tensor<F>, #[define(F)] _dtype: ElemType) {
    let d = h.shape(1);
    if ABSOLUTE_POS >= h.shape(0) * d {
        terminate!();
    }
    let (row, c) = (ABSOLUTE_POS / d, ABSOLUTE_POS % d);
    out[ABSOLUTE_POS] = h[row * h.stride(0) + c * h.stride(1)];
}

/// `out[rows[r], c] = h[rows[r], c] + scale[rows[r]] · (b2[c] + Σ_j hidden[r, j] · w2[j, c])`
/// for the `count` compacted rows.
#[cube(launch)]
fn output_kernel<F: Float>(
    h: &Tensor<F>,
    scale: &Tensor<F>,
    rows: &Tensor<u32>,
    count: &Tensor<u32>,
    hidden: &Tensor<F>,
    w2: &Tensor<F>,
    b2: &Tensor<F>,
    out: &mut Tensor<F>,
    #[define(F)] _dtype: ElemType,
) {
    let d = w2.shape(1);
    let kept = count[0] as usize;
    let first = CUBE_POS_Y as usize * TILE;
    if first >= kept {
        terminate!();
    }
    let r = first + UNIT_POS_Y as usize;
    let c = CUBE_POS_X as usize * TILE + UNIT_POS_X as usize;
    let ok = r < kept;
    let acc = tile_dot::<F>(hidden, r, ok, w2, c, w2.shape(0));
    if ok && c < d {
        let row = rows[r] as usize;
        let base = h[row * h.stride(0) + c * h.stride(1)];
        let update = acc + b2[c * b2.stride(0)];
        out[row * d + c] = base + scale[row * scale.stride(0)] * update;
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
        let float = dtype_to_storage_type(dtype);
        let new = |shape: Vec<usize>, dtype: DType| {
            empty_device_contiguous_dtype(client.clone(), device.clone(), Shape::from(shape), dtype)
        };
        let (rows, count) = (new(vec![n], DType::U32), new(vec![1], DType::U32));
        let scale = into_contiguous(scale);
        compact_kernel::launch(
            &client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(SCAN as u32),
            scale.clone().into_tensor_arg(),
            rows.clone().into_tensor_arg(),
            count.clone().into_tensor_arg(),
            SCAN,
            float,
        );

        // One cube per 16×16 output tile, sized for every row: the cubes past the count exit.
        let tiles =
            |cols: usize| CubeCount::Static(cols.div_ceil(TILE) as u32, n.div_ceil(TILE) as u32, 1);
        let tile_dim = CubeDim::new_2d(TILE as u32, TILE as u32);
        let hidden = new(vec![n, d_ff], dtype);
        hidden_kernel::launch(
            &client,
            tiles(d_ff),
            tile_dim,
            x.into_tensor_arg(),
            rows.clone().into_tensor_arg(),
            count.clone().into_tensor_arg(),
            w1.into_tensor_arg(),
            b1.into_tensor_arg(),
            hidden.clone().into_tensor_arg(),
            float,
        );

        let out = new(vec![n, d], dtype);
        let cube_dim = CubeDim::new(&client, n * d);
        copy_kernel::launch(
            &client,
            calculate_cube_count_elemwise(&client, n * d, cube_dim),
            cube_dim,
            h.clone().into_tensor_arg(),
            out.clone().into_tensor_arg(),
            float,
        );
        output_kernel::launch(
            &client,
            tiles(d),
            tile_dim,
            h.into_tensor_arg(),
            scale.into_tensor_arg(),
            rows.into_tensor_arg(),
            count.into_tensor_arg(),
            hidden.into_tensor_arg(),
            w2.into_tensor_arg(),
            b2.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            float,
        );
        out
    }
}
