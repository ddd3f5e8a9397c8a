//! Sparse inference (§3.6): only the kept tokens run the FFN, gathered into a dense [k, d] block
//! and scattered back; the halted rows get a zero update.

use burn::tensor::{Bool, IndexingUpdateOp, Int, Tensor};

use crate::block::Ffn;

/// Flat indices (into B·T) of the `true` entries of `keep` [B, T].
///
/// This reads the mask back to the host (`argwhere` is a synchronous read), so sparse execution
/// is a native-inference path; the browser trains and evaluates with soft gates.
pub fn keep_indices(keep: Tensor<2, Bool>) -> Tensor<1, Int> {
    let n = keep.shape().num_elements();
    let idx = keep.reshape([n]).argwhere();
    let k = idx.dims()[0];
    idx.reshape([k])
}

/// `h` [B, T, d] plus `rows` [k, d], the updates of the flat rows `keep`, each scaled by its
/// `scale` [B, T, 1]; the other rows unchanged. Added straight into `h` (no zero [B, T, d]
/// update tensor and no full-size add: both cost a pass over memory per block).
pub fn add_rows(
    h: Tensor<3>,
    rows: Tensor<2>,
    keep: Tensor<1, Int>,
    scale: Tensor<3>,
) -> Tensor<3> {
    let [b, t, d] = h.dims();
    if keep.dims()[0] == 0 {
        return h;
    }
    let rows = rows * scale.reshape([b * t, 1]).select(0, keep.clone());
    h.reshape([b * t, d])
        .select_assign(0, keep, rows, IndexingUpdateOp::Add)
        .reshape([b, t, d])
}

/// Kept positions of each of `b` sequences of length `t`, from ascending flat indices (a host
/// read: native inference only).
pub fn positions_per_sequence(keep: &Tensor<1, Int>, b: usize, t: usize) -> Vec<Vec<i64>> {
    let flat: Vec<i64> = keep
        .clone()
        .into_data()
        .convert::<i64>()
        .try_into_vec::<i64>()
        .expect("argwhere yields integer indices");
    let mut out = vec![Vec::new(); b];
    for i in flat {
        out[i as usize / t].push(i % t as i64);
    }
    out
}

/// `h` plus the FFN update of the rows `keep` of `x` [B, T, d], each scaled by its `scale`
/// [B, T, 1]. Equal to `h + scale ⊙ ffn(x)` when `scale` is zero off `keep`.
pub fn add_ffn_rows(
    h: Tensor<3>,
    ffn: &Ffn,
    x: Tensor<3>,
    keep: Tensor<1, Int>,
    scale: Tensor<3>,
) -> Tensor<3> {
    let [b, t, d] = x.dims();
    if keep.dims()[0] == 0 {
        return h;
    }
    let rows = ffn.forward(x.reshape([b * t, d]).select(0, keep.clone()));
    add_rows(h, rows, keep, scale)
}
