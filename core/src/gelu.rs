//! GELU, exact form gelu(x) = x·Φ(x) (the FFN's activation, §2.1), with a fast kernel on flex.
//!
//! Why a kernel of our own: flex evaluates GELU (and its backward) one element at a time on one
//! thread with libm's scalar `erff`, whose slow path (|x| ≳ 1.2, where trained pre-activations
//! live) calls `expf`; on a trained model it is a third of a CPU forward. Here Φ comes from a
//! branch-free fit that the compiler vectorises, across rayon's threads. Every other device (and
//! a dtype other than f32) keeps Burn's GELU.

use burn::tensor::{Tensor, activation};

use crate::flex_kernel::exp;

/// x·Φ(x), Φ the standard normal CDF: Burn's `gelu`, computed by [`gelu_f32`] on flex.
pub fn gelu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    // In the browser the flex fallback keeps Burn's GELU (no threads to spread it over).
    #[cfg(not(target_family = "wasm"))]
    if flex::applies(&x) {
        return flex::gelu(x);
    }
    activation::gelu(x)
}

#[cfg(not(target_family = "wasm"))]
mod flex {
    use super::*;
    use burn::tensor::{DType, TensorData};
    use rayon::prelude::*;

    /// f32 on flex, with or without autodiff (training takes the kernel too).
    pub fn applies<const D: usize>(x: &Tensor<D>) -> bool {
        x.dtype() == DType::F32 && crate::flex_kernel::is_flex(&x.device())
    }

    pub fn gelu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
        let (device, shape) = (x.device(), x.shape());
        // In inference x is consumed, so flex can hand its buffer over instead of copying it.
        let tracked = device.is_autodiff().then(|| x.clone());
        let mut y = x
            .into_data()
            .try_into_vec::<f32>()
            .expect("`applies` admits f32 tensors only");
        // Elements per rayon task: large enough to amortise the hand-off.
        const CHUNK: usize = 1 << 14;
        let Some(x) = tracked else {
            y.par_chunks_mut(CHUNK).for_each(|c| widest::run(c, None));
            return Tensor::from_data(TensorData::new(y, shape), &device);
        };
        let mut dy = y.clone();
        y.par_chunks_mut(CHUNK)
            .zip(dy.par_chunks_mut(CHUNK))
            .for_each(|(y, dy)| widest::run(y, Some(dy)));
        let y = Tensor::<D>::from_data(TensorData::new(y, shape.clone()), &device);
        let dy = Tensor::<D>::from_data(TensorData::new(dy, shape), &device);
        // Training: the value y with the gradient gelu′(x) — (x − sg(x)) is zero in value and
        // the identity in the backward pass, so it adds only the derivative's path.
        y + (x.clone() - x.detach()) * dy
    }
}

/// The element loop compiled for the widest vector unit the CPU has (`flex_kernel::widest!`).
/// No FMA contraction happens, so every path gives the same bits.
#[cfg(not(target_family = "wasm"))]
mod widest {
    use super::{gelu_f32, gelu_grad_f32};

    /// gelu(x) in place over `y`; with `dy`, also gelu′(x) into it.
    #[inline(always)]
    fn portable(y: &mut [f32], dy: Option<&mut [f32]>) {
        match dy {
            None => y.iter_mut().for_each(|v| *v = gelu_f32(*v)),
            Some(dy) => {
                for (v, d) in y.iter_mut().zip(dy.iter_mut()) {
                    let x = *v;
                    *v = gelu_f32(x);
                    *d = gelu_grad_f32(x);
                }
            }
        }
    }

    crate::flex_kernel::widest!(pub fn run(y: &mut [f32], dy: Option<&mut [f32]>) => portable);
}

const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;

/// x·Φ(x).
#[inline(always)]
pub fn gelu_f32(x: f32) -> f32 {
    x * normal_cdf(x)
}

/// d/dx x·Φ(x) = Φ(x) + x·φ(x).
#[inline(always)]
pub fn gelu_grad_f32(x: f32) -> f32 {
    normal_cdf(x) + x * FRAC_1_SQRT_2PI * exp(-0.5 * x * x)
}

/// Φ(x) = ½·erfc(−x/√2), with erfc(z) = t·exp(−z² + P(t)), t = 1/(1 + |z|/2), for z ≥ 0 and
/// 2 − erfc(−z) below: the Chebyshev fit of Numerical Recipes' `erfcc` (fractional error below
/// 1.2e-7 everywhere), so Φ keeps its relative precision far into the tail.
#[inline(always)]
fn normal_cdf(x: f32) -> f32 {
    let z = -x * std::f32::consts::FRAC_1_SQRT_2;
    let a = z.abs();
    let t = 1.0 / (1.0 + 0.5 * a);
    let p = -1.265_512_2
        + t * (1.000_023_7
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_204
                                + t * (1.488_515_9 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let e = t * exp(p - a * a);
    0.5 * if z >= 0.0 { e } else { 2.0 - e }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, Tensor, TensorData};
    use proptest::prelude::*;

    /// The erf form in f64 (libm's erf, within a few ulp), the ground truth for the fit.
    fn reference(x: f32) -> f64 {
        let x = x as f64;
        0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
    }

    proptest! {
        #[test]
        fn gelu_matches_the_erf_form(x in -12.0f32..12.0) {
            let want = reference(x);
            let got = gelu_f32(x) as f64;
            // Absolute 1e-6 near zero, relative 1e-5 elsewhere (f32 has ~6e-8).
            prop_assert!((got - want).abs() <= 1e-6 + 1e-5 * want.abs(), "gelu({x}) = {got}, want {want}");
        }

        #[test]
        fn gelu_grad_matches_finite_differences(x in -8.0f32..8.0) {
            let h = 1e-3f64;
            let f = |x: f64| reference(x as f32);
            // Central difference on the f64 reference at f32-representable points.
            let (lo, hi) = ((x as f64 - h) as f32, (x as f64 + h) as f32);
            let fd = (f(hi as f64) - f(lo as f64)) / (hi as f64 - lo as f64);
            prop_assert!((gelu_grad_f32(x) as f64 - fd).abs() < 1e-4, "gelu'({x}) = {}, fd {fd}", gelu_grad_f32(x));
        }
    }

    #[test]
    fn every_vector_width_gives_the_same_bits() {
        let xs: Vec<f32> = (0..10_000).map(|i| (i as f32 - 5000.0) / 400.0).collect();
        let (mut y, mut dy) = (xs.clone(), xs.clone());
        widest::run(&mut y, Some(&mut dy)); // AVX-512 or AVX2 where the CPU has them
        for (i, &x) in xs.iter().enumerate() {
            assert_eq!(y[i].to_bits(), gelu_f32(x).to_bits(), "gelu({x})");
            assert_eq!(dy[i].to_bits(), gelu_grad_f32(x).to_bits(), "gelu'({x})");
        }
    }

    #[test]
    fn flex_kernel_equals_burns_gelu_forward_and_backward() {
        let device = Device::flex();
        let data: Vec<f32> = (0..4096).map(|i| (i as f32 - 2048.0) / 170.0).collect();
        let x = Tensor::<2>::from_data(TensorData::new(data.clone(), [64, 64]), &device);
        assert!(
            flex::applies(&x),
            "the kernel is not the path taken on flex"
        );
        let want = activation::gelu(x.clone())
            .into_data()
            .try_into_vec::<f32>()
            .unwrap_or_default();
        let got = gelu(x)
            .into_data()
            .try_into_vec::<f32>()
            .unwrap_or_default();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-6 + 1e-5 * w.abs(), "{g} vs {w}");
        }

        // Under autodiff the value is the same and the gradient is gelu′.
        let ad = device.clone().autodiff();
        let grads_of = |f: fn(Tensor<2>) -> Tensor<2>| {
            let x =
                Tensor::<2>::from_data(TensorData::new(data.clone(), [64, 64]), &ad).require_grad();
            assert!(
                flex::applies(&x),
                "the kernel is not the path taken under autodiff"
            );
            let g = f(x.clone()).sum().backward();
            x.grad(&g)
                .map(|t| t.into_data().try_into_vec::<f32>().unwrap_or_default())
        };
        let ours = grads_of(gelu).unwrap_or_default();
        let burns = grads_of(activation::gelu).unwrap_or_default();
        assert_eq!(ours.len(), 4096);
        for (o, b) in ours.iter().zip(&burns) {
            assert!((o - b).abs() < 1e-5, "{o} vs {b}");
        }
    }
}
