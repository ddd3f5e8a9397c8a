use burn::tensor::{Device, Int, Tensor, TensorData};
use tsa_core::{Routing, TsaConfig, TsaModel};

pub fn cpu() -> Device {
    Device::flex()
}

pub fn all_routings() -> Vec<Routing> {
    vec![
        Routing::Dense,
        Routing::tsa(0.01),
        Routing::EarlyExit,
        Routing::MixtureOfDepths { capacity: 0.5 },
    ]
}

/// The micro recipe's model: d=32, L=3, H=2, d_ff=64, context 16.
pub fn micro(vocab: usize, routing: Routing) -> TsaConfig {
    tsa_core::Recipe::micro(vocab, routing).model
}

pub fn model(config: &TsaConfig, seed: u64, device: &Device) -> TsaModel {
    device.seed(seed);
    config.init(device).expect("valid test config")
}

pub fn tokens(rows: &[Vec<i32>], device: &Device) -> Tensor<2, Int> {
    let t = rows[0].len();
    let flat: Vec<i32> = rows.iter().flatten().copied().collect();
    Tensor::from_data(TensorData::new(flat, [rows.len(), t]), device)
}

pub fn floats<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    tsa_core::read::block_on(tsa_core::read::floats(t)).expect("read")
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// A config with these block shapes (for building single blocks and attentions).
pub fn shape(d: usize, heads: usize, d_ff: usize, layers: usize) -> TsaConfig {
    TsaConfig::new(10)
        .with_d_model(d)
        .with_n_heads(heads)
        .with_d_ff(d_ff)
        .with_n_layers(layers)
}

/// A model on `device` whose untrained routers halt part of the tokens: N(0, 0.02²) routers
/// with their last layer's weights spread (×400) around a zero bias. (Built on flex and loaded
/// into a fresh model on `device`, whose parameters an autodiff device then tracks.)
pub fn halting_some_on(cfg: TsaConfig, device: &Device) -> TsaModel {
    use burn::module::Module;
    let flex = cpu();
    let cfg = cfg.with_init(tsa_core::InitScheme::Normal);
    let mut m = model(&cfg, 9, &flex);
    for r in m.routers.iter_mut() {
        r.out.weight = burn::module::Param::from_tensor(r.out.weight.val().mul_scalar(400.0));
        r.out.bias = Some(burn::module::Param::from_tensor(Tensor::zeros([1], &flex)));
    }
    model(&cfg, 9, device).load_record(m.into_record())
}
