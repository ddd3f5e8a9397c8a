//! Matmuls over the compacted rows, in 16×16 output tiles through shared memory, dispatched for
//! every row: the cubes whose rows all lie past the device-side count exit whole (a bounded grid
//! instead of an indirect dispatch).

use burn::backend::cubecl::dtype_to_storage_type;
use burn::tensor::Shape;
use burn_cubecl::cubecl;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use cubecl::{CubeCount, CubeDim, calculate_cube_count_elemwise};

use crate::compact::Kept;

/// Outputs per cube side: a 16×16 tile of outputs per cube (256 invocations, WebGPU's limit).
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

/// `y[r, j] = act(bias[j] + Σ_i x[rows[r], i] · w[i, j])` for the `count` compacted rows: the
/// kept rows gathered and multiplied in one pass. `act` is exact GELU (the FFN's first layer)
/// or none (a projection; `bias` is then not read).
#[cube(launch)]
fn gathered_linear_kernel<F: Float>(
    x: &Tensor<F>,
    rows: &Tensor<u32>,
    count: &Tensor<u32>,
    w: &Tensor<F>,
    bias: &Tensor<F>,
    y: &mut Tensor<F>,
    #[comptime] gelu: bool,
    #[define(F)] _dtype: ElemType,
) {
    let width = w.shape(1);
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
    let acc = tile_dot::<F>(x, row, ok, w, j, w.shape(0));
    if ok && j < width {
        if gelu {
            let v = acc + bias[j * bias.stride(0)];
            // Exact GELU, as the model's: v/2 · (1 + erf(v/√2)).
            let erf = F::erf(v * F::new(std::f32::consts::FRAC_1_SQRT_2));
            y[r * width + j] = v * F::new(0.5) * (F::new(1.0) + erf);
        } else {
            y[r * width + j] = acc;
        }
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

/// `out[rows[r], c] = h[rows[r], c] + scale[rows[r]] · (b[c] + Σ_j y[r, j] · w[j, c])` for the
/// `count` compacted rows: the kept rows' second linear layer added back into the residual.
#[cube(launch)]
fn scatter_add_kernel<F: Float>(
    h: &Tensor<F>,
    scale: &Tensor<F>,
    rows: &Tensor<u32>,
    count: &Tensor<u32>,
    y: &Tensor<F>,
    w: &Tensor<F>,
    bias: &Tensor<F>,
    out: &mut Tensor<F>,
    #[comptime] has_bias: bool,
    #[define(F)] _dtype: ElemType,
) {
    let d = w.shape(1);
    let kept = count[0] as usize;
    let first = CUBE_POS_Y as usize * TILE;
    if first >= kept {
        terminate!();
    }
    let r = first + UNIT_POS_Y as usize;
    let c = CUBE_POS_X as usize * TILE + UNIT_POS_X as usize;
    let ok = r < kept;
    let acc = tile_dot::<F>(y, r, ok, w, c, w.shape(0));
    if ok && c < d {
        let row = rows[r] as usize;
        let base = h[row * h.stride(0) + c * h.stride(1)];
        let mut update = acc;
        if has_bias {
            update += bias[c * bias.stride(0)];
        }
        out[row * d + c] = base + scale[row * scale.stride(0)] * update;
    }
}

/// One cube per 16×16 output tile, for `n` rows (all of them: the cubes past the count exit).
fn tiles(n: usize, cols: usize) -> CubeCount {
    CubeCount::Static(cols.div_ceil(TILE) as u32, n.div_ceil(TILE) as u32, 1)
}

/// The kept rows of `x` [n, d] times `w` [d, width] (+ `bias` and GELU for the FFN), compacted:
/// [n, width], of which the first `count` rows are written.
pub fn gathered_linear(
    x: CubeTensor,
    kept: &Kept,
    w: CubeTensor,
    gelu_bias: Option<CubeTensor>,
) -> CubeTensor {
    let (client, device, dtype) = (x.client.clone(), x.device.clone(), x.dtype);
    let n = x.meta.shape().dims::<2>()[0];
    let width = w.meta.shape().dims::<2>()[1];
    let y =
        empty_device_contiguous_dtype(client.clone(), device, Shape::from(vec![n, width]), dtype);
    let gelu = gelu_bias.is_some();
    let bias = gelu_bias.unwrap_or_else(|| w.clone()); // not read without GELU
    gathered_linear_kernel::launch(
        &client,
        tiles(n, width),
        CubeDim::new_2d(TILE as u32, TILE as u32),
        x.into_tensor_arg(),
        kept.rows.clone().into_tensor_arg(),
        kept.count.clone().into_tensor_arg(),
        w.into_tensor_arg(),
        bias.into_tensor_arg(),
        y.clone().into_tensor_arg(),
        gelu,
        dtype_to_storage_type(dtype),
    );
    y
}

/// `h` [n, d] with `scale[row] · (y[r] · w + bias)` added to each kept row (`y` compacted as
/// [`gathered_linear`] leaves it), the other rows copied: a new [n, d] tensor.
pub fn scatter_add(
    h: CubeTensor,
    scale: CubeTensor,
    kept: Kept,
    y: CubeTensor,
    w: CubeTensor,
    bias: Option<CubeTensor>,
) -> CubeTensor {
    let (client, device, dtype) = (h.client.clone(), h.device.clone(), h.dtype);
    let [n, d] = h.meta.shape().dims::<2>();
    let float = dtype_to_storage_type(dtype);
    let out = empty_device_contiguous_dtype(client.clone(), device, Shape::from(vec![n, d]), dtype);
    let cube_dim = CubeDim::new(&client, n * d);
    copy_kernel::launch(
        &client,
        calculate_cube_count_elemwise(&client, n * d, cube_dim),
        cube_dim,
        h.clone().into_tensor_arg(),
        out.clone().into_tensor_arg(),
        float,
    );
    let has_bias = bias.is_some();
    let bias = bias.unwrap_or_else(|| w.clone()); // not read without a bias
    scatter_add_kernel::launch(
        &client,
        tiles(n, d),
        CubeDim::new_2d(TILE as u32, TILE as u32),
        h.into_tensor_arg(),
        scale.into_tensor_arg(),
        kept.rows.into_tensor_arg(),
        kept.count.into_tensor_arg(),
        y.into_tensor_arg(),
        w.into_tensor_arg(),
        bias.into_tensor_arg(),
        out.clone().into_tensor_arg(),
        has_bias,
        float,
    );
    out
}
