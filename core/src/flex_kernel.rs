//! What core's own flex kernels (`gelu.rs`, `fused_attention.rs`) share: which device they
//! serve, a branch-free `exp` that vectorises, and the run-time choice of the widest vector unit.

/// Whether `device` is flex, or autodiff over flex.
#[cfg(not(target_family = "wasm"))]
pub fn is_flex(device: &burn::tensor::Device) -> bool {
    use burn::backend::DispatchDevice;
    match device.as_dispatch() {
        DispatchDevice::Flex(_) => true,
        DispatchDevice::Autodiff(inner) => matches!(**inner, DispatchDevice::Flex(_)),
        _ => false,
    }
}

/// e^x to a few ulp (4e-7 relative, tested), branch-free (so loops over it vectorise):
/// x = n·ln 2 + r, |r| ≤ ln 2 / 2, e^r by its Taylor polynomial, 2^n written into the exponent
/// bits. x is clamped to [−87, 88], where 2^n stays a normal number (e^−87 ≈ 1.6e-38 stands
/// for 0).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // Adding 1.5·2²³ rounds to an integer in the low mantissa bits; +127 is the exponent bias.
    const SHIFT: f32 = 12_582_912.0 + 127.0;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let x = x.clamp(-87.0, 88.0);
    let k = x * std::f32::consts::LOG2_E + SHIFT;
    let n = k - SHIFT;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let er = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    er * f32::from_bits(k.to_bits() << 23)
}

/// `widest!(fn name(args) => inner)` defines `name`, which runs `inner` (an `#[inline(always)]`
/// function) compiled for the widest vector unit the CPU has, chosen at run time as gemm does:
/// AVX-512 (16 lanes), AVX2 (8), else the portable build's SSE2 (4).
#[cfg(not(target_family = "wasm"))]
macro_rules! widest {
    ($vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) => $inner:path) => {
        $vis fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                fn avx512($($arg: $ty),*) {
                    $inner($($arg),*)
                }
                #[target_feature(enable = "avx2")]
                fn avx2($($arg: $ty),*) {
                    $inner($($arg),*)
                }
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F, detected just above.
                    return unsafe { avx512($($arg),*) };
                }
                if std::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2, detected just above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $inner($($arg),*)
        }
    };
}
#[cfg(not(target_family = "wasm"))]
pub(crate) use widest;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_std_to_a_few_ulp() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let (ours, std) = (exp(x), x.exp());
            assert!(
                ((ours - std) / std).abs() < 4e-7,
                "exp({x}) = {ours}, std {std}"
            );
            x += 0.0137;
        }
        assert!(exp(-1e4) < 1e-37 && exp(-1e4) >= 0.0);
    }
}
