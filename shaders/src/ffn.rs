//! The kept tokens' FFN: compaction, first layer + GELU over the gathered rows, second layer
//! added back into the residual scaled.

use burn_cubecl::tensor::CubeTensor;

use crate::compact::compact;
use crate::rows::{gathered_linear, scatter_add};

/// `h + scale ⊙ ffn(x)` over rows [n, d], the FFN run only for the rows with `scale > 0`.
pub fn sparse_ffn_add(
    h: CubeTensor,
    x: CubeTensor,
    scale: CubeTensor,
    [w1, b1, w2, b2]: [CubeTensor; 4],
) -> CubeTensor {
    let kept = compact(scale.clone());
    let hidden = gathered_linear(x, &kept, w1, Some(b1));
    scatter_add(h, scale, kept, hidden, w2, Some(b2))
}
