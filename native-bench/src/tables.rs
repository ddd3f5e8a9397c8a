//! The paper's tables as data: which arms each one trains, on what, under which recipe, and the
//! numbers the paper published for them. `reproduce` runs any of them with one loop.

use clap::ValueEnum;
use tsa_core::data::tasks::Task;
use tsa_core::{Recipe, Routing, TsaGate};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Table {
    /// Synthetic copy/sort: baseline vs TSA.
    Table1,
    /// Tiny-Shakespeare: baseline vs TSA.
    Table2,
    /// Tiny-Shakespeare: baseline, TSA, early exit at matched α.
    Table4,
    /// λ sweep.
    Table6,
    /// Early-exit threshold sweep.
    Table7,
    /// Validation loss against *executed* TLOps saved: dense, the paper's TSA (soft and
    /// thresholded), straight-through and Gumbel TSA at compute targets, early exit (threshold
    /// sweep) and Mixture-of-Depths (capacity sweep, causal predictor at inference).
    Pareto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scale {
    /// Small models and budgets that fit a 2-core CPU (minutes per arm).
    Quick,
    /// The paper's shapes and budgets (for a GPU).
    Paper,
}

/// A recipe (model shape and budget, shared by every arm of a table) at each scale.
#[derive(Clone, Copy)]
pub struct Recipes {
    pub quick: fn(usize, Routing) -> Recipe,
    pub paper: fn(usize, Routing) -> Recipe,
}

impl Recipes {
    pub fn at(self, scale: Scale) -> fn(usize, Routing) -> Recipe {
        match scale {
            Scale::Quick => self.quick,
            Scale::Paper => self.paper,
        }
    }
}

const LM: Recipes = Recipes {
    quick: Recipe::quick_lm,
    paper: Recipe::paper_lm,
};

/// The tasks have their own fixed vocabulary, so their recipes ignore the corpus's.
const TASKS: Recipes = Recipes {
    quick: |_, r| Recipe::synthetic_quick(r),
    paper: |_, r| Recipe::synthetic(r),
};

/// What an arm trains and is evaluated on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dataset {
    /// The character corpus (`--corpus`; Tiny-Shakespeare unless given).
    Shakespeare,
    Task(Task),
}

impl Dataset {
    pub fn name(self) -> String {
        match self {
            Dataset::Shakespeare => "Shakespeare".into(),
            Dataset::Task(t) => format!("{t:?}"),
        }
    }
}

/// An arm's numbers as the paper prints them: `None` where it prints "—" or has no such column.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Paper {
    pub params: Option<usize>,
    pub accuracy: Option<f64>,
    pub perplexity: Option<f64>,
    pub val_loss: Option<f64>,
    pub bpc: Option<f64>,
    pub alpha: Option<f64>,
    /// TLOps saved, in percent.
    pub saved: Option<f64>,
}

impl Paper {
    /// A row of Table 1.
    fn task(accuracy: f64, perplexity: f64, alpha: f64, saved: Option<f64>) -> Self {
        Self {
            accuracy: Some(accuracy),
            perplexity: Some(perplexity),
            alpha: Some(alpha),
            saved,
            ..Self::default()
        }
    }

    /// A row of a language-model table (2 and 4).
    fn lm(val_loss: f64, bpc: f64, alpha: f64, saved: Option<f64>) -> Self {
        Self {
            val_loss: Some(val_loss),
            bpc: Some(bpc),
            alpha: Some(alpha),
            saved,
            ..Self::default()
        }
    }

    fn with_params(self, params: usize) -> Self {
        Self {
            params: Some(params),
            ..self
        }
    }
}

/// One trained row of a table.
#[derive(Debug, Clone, PartialEq)]
pub struct ArmSpec {
    pub data: Dataset,
    pub label: String,
    pub routing: Routing,
    /// Trains with `TrainConfig::skip_halted` (halted tokens skip the FFN in training).
    pub skip_halted: bool,
    /// Blocks, where the arm's model is shallower than the table's (the dense models of a routed
    /// model's compute).
    pub layers: Option<usize>,
    /// The arm's row in the paper, where it has one.
    pub paper: Option<Paper>,
}

impl ArmSpec {
    /// The table's recipe with what this arm changes in it.
    pub fn recipe(&self, mut recipe: Recipe) -> Recipe {
        recipe.train.skip_halted = self.skip_halted;
        if let Some(layers) = self.layers {
            recipe.model.n_layers = layers;
        }
        recipe
    }
}

/// An arm on the character corpus that the paper has no row for.
fn arm(label: impl Into<String>, routing: Routing) -> ArmSpec {
    ArmSpec {
        data: Dataset::Shakespeare,
        label: label.into(),
        routing,
        skip_halted: false,
        layers: None,
        paper: None,
    }
}

fn published(label: &str, routing: Routing, paper: Paper) -> ArmSpec {
    ArmSpec {
        paper: Some(paper),
        ..arm(label, routing)
    }
}

/// The paper's TSA (soft gate, its default λ = 0.001, §3.2).
fn paper_tsa() -> Routing {
    Routing::tsa(0.001)
}

/// The columns of the paper's rows, in its order. A table prints those its arms have numbers for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    Task,
    Model,
    Params,
    Accuracy,
    Perplexity,
    ValLoss,
    Bpc,
    Alpha,
    Saved,
}

impl Column {
    const ALL: [Column; 9] = [
        Column::Task,
        Column::Model,
        Column::Params,
        Column::Accuracy,
        Column::Perplexity,
        Column::ValLoss,
        Column::Bpc,
        Column::Alpha,
        Column::Saved,
    ];

    /// The arm's cell as the paper prints it, or `None` where it prints "—".
    fn value(self, arm: &ArmSpec, p: &Paper) -> Option<String> {
        let num = |x: Option<f64>, digits: usize| x.map(|x| format!("{x:.digits$}"));
        match self {
            Column::Task => match arm.data {
                Dataset::Task(_) => Some(arm.data.name()),
                Dataset::Shakespeare => None,
            },
            Column::Model => Some(arm.label.clone()),
            Column::Params => p.params.map(thousands),
            Column::Accuracy => num(p.accuracy, 4),
            Column::Perplexity => num(p.perplexity, 3),
            Column::ValLoss => num(p.val_loss, 4),
            Column::Bpc => num(p.bpc, 4),
            Column::Alpha => num(p.alpha, 3),
            Column::Saved => p.saved.map(|s| format!("{s:.1}%")),
        }
    }
}

/// `4782336` as `4,782,336`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut s = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            s.push(',');
        }
        s.push(c);
    }
    s
}

/// A plot of a table's arms beyond the validation curves (early exit's threshold sweep is drawn
/// wherever an early-exit arm runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plot {
    /// `{table}-pareto.svg`: soft α against validation loss, a point per arm.
    LambdaSweep,
    /// `{table}.svg`: executed TLOps saved against the validation loss executing them gives.
    Pareto,
}

/// One of the paper's tables: its arms in order (every arm shares the recipe, budget and seed)
/// and what the paper published.
pub struct TableSpec {
    pub recipes: Recipes,
    pub arms: Vec<ArmSpec>,
    /// What the paper says where it prints no rows.
    pub note: &'static str,
    pub plot: Option<Plot>,
}

impl TableSpec {
    fn on(recipes: Recipes) -> Self {
        Self {
            recipes,
            arms: Vec::new(),
            note: "",
            plot: None,
        }
    }

    /// The arms the paper has a row for, with their numbers.
    fn published(&self) -> impl Iterator<Item = (&ArmSpec, &Paper)> {
        self.arms
            .iter()
            .filter_map(|a| Some((a, a.paper.as_ref()?)))
    }

    /// The columns the paper prints: those its rows have a number in.
    pub fn columns(&self) -> Vec<Column> {
        (Column::ALL.into_iter())
            .filter(|c| self.published().any(|(a, p)| c.value(a, p).is_some()))
            .collect()
    }

    /// The paper's numbers as the reports print them: its rows (markdown cells, no header), then
    /// its prose.
    pub fn paper_md(&self) -> String {
        let columns = self.columns();
        let rows = self.published().map(|(a, p)| {
            let cells: Vec<String> = (columns.iter())
                .map(|c| c.value(a, p).unwrap_or_else(|| "—".into()))
                .collect();
            format!("| {} |", cells.join(" | "))
        });
        let mut lines: Vec<String> = rows.collect();
        if !self.note.is_empty() {
            lines.push(self.note.into());
        }
        lines.join("\n")
    }
}

/// Early exit's confidence thresholds (the paper sweeps 13 without listing them, §3.5).
pub const EXIT_THRESHOLDS: [f64; 13] = [
    0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.97, 0.99, 0.999,
];

/// Early exit is reported at the threshold whose α is nearest the α that the arm labelled
/// `MATCHED_ARM` trained to, or the paper's TSA α where no such arm ran before it.
pub const MATCHED_ARM: &str = "TSA";
pub const MATCHED_ALPHA: f64 = 0.726;

impl Table {
    pub fn spec(self) -> TableSpec {
        match self {
            Table::Table1 => table1(),
            Table::Table2 => table2(),
            Table::Table4 => table4(),
            Table::Table6 => table6(),
            Table::Table7 => table7(),
            Table::Pareto => pareto(),
        }
    }
}

/// Table 1 (§3.1): accuracy, perplexity, α and TLOps saved (%) on the synthetic tasks.
fn table1() -> TableSpec {
    use Task::{Copy, Sort};
    // The paper's rows: task, model, and its accuracy, perplexity, α and TLOps saved (%).
    #[rustfmt::skip]
    let rows = [
        (Copy, "Baseline", Routing::Dense, Paper::task(1.0000, 1.012, 1.000, None)),
        (Copy, "TSA",      paper_tsa(),    Paper::task(1.0000, 1.012, 0.341, Some(54.9))),
        (Sort, "Baseline", Routing::Dense, Paper::task(0.9915, 1.079, 1.000, None)),
        (Sort, "TSA",      paper_tsa(),    Paper::task(0.9878, 1.087, 0.730, Some(22.5))),
    ];
    TableSpec {
        arms: (rows.into_iter())
            .map(|(task, label, routing, paper)| ArmSpec {
                data: Dataset::Task(task),
                ..published(label, routing, paper)
            })
            .collect(),
        ..TableSpec::on(TASKS)
    }
}

/// Table 2 (§3.2): params, val loss, BPC, α and TLOps saved (%) on Tiny-Shakespeare.
fn table2() -> TableSpec {
    let baseline = Paper::lm(1.4422, 2.0807, 1.000, None).with_params(4_782_336);
    let tsa = Paper::lm(1.4482, 2.0893, 0.726, Some(22.8)).with_params(4_864_901);
    TableSpec {
        arms: vec![
            published("Baseline", Routing::Dense, baseline),
            published("TSA", paper_tsa(), tsa),
        ],
        ..TableSpec::on(LM)
    }
}

/// Table 4 (§3.5): val loss, BPC, α and TLOps saved (%), early exit at TSA's α.
fn table4() -> TableSpec {
    #[rustfmt::skip]
    let arms = vec![
        published("Baseline",   Routing::Dense,     Paper::lm(1.4422, 2.0807, 1.000, None)),
        published("TSA",        paper_tsa(),        Paper::lm(1.4482, 2.0893, 0.726, Some(22.8))),
        published("Early Exit", Routing::EarlyExit, Paper::lm(1.4586, 2.1043, 0.728, Some(22.7))),
    ];
    TableSpec {
        arms,
        ..TableSpec::on(LM)
    }
}

/// Table 6 (§3.4): the λ sweep. Its appendix rows are not in the paper's text; the note is what
/// §3.4 says of them.
fn table6() -> TableSpec {
    let lambdas = [0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5];
    TableSpec {
        arms: (lambdas.iter())
            .map(|&l| arm(format!("TSA λ={l}"), Routing::tsa(l)))
            .collect(),
        note: "λ=0: α 0.755 (20.4% saved); λ∈[0, 0.1]: quality range 0.015 nats; λ=0.05: 50.4% saved at <0.5% loss; λ=0.5: α 0.036, quality −5.9%",
        plot: Some(Plot::LambdaSweep),
        ..TableSpec::on(LM)
    }
}

/// Table 7 (§3.5, appendix): early exit over `EXIT_THRESHOLDS`.
fn table7() -> TableSpec {
    TableSpec {
        arms: vec![arm("Early Exit", Routing::EarlyExit)],
        note: "13 thresholds; the one matching α≈0.726 gave val loss 1.4586 (α 0.728)",
        ..TableSpec::on(LM)
    }
}

/// Beyond the paper: every routing variant by the compute it executes (early exit's points come
/// from its threshold sweep).
fn pareto() -> TableSpec {
    use TsaGate::{Gumbel, StraightThrough, StraightThroughScaled};
    let gated = |gate, target: f64| Routing::Tsa {
        lambda: 0.0,
        gate,
        target: Some(target),
        commit: 0.0,
    };
    // Dense models of less depth: the frontier a routed model must beat at equal compute (a
    // routed model at executed α 0.5 runs 3.5 of 6 blocks per token).
    let shallow = |layers: usize| ArmSpec {
        layers: Some(layers),
        ..arm(format!("Baseline L={layers}"), Routing::Dense)
    };
    let mut arms = vec![
        arm("Baseline", Routing::Dense),
        shallow(4),
        shallow(3),
        arm("TSA (paper, λ=0.001)", Routing::tsa(0.001)),
        arm("TSA (paper, λ=0.05)", Routing::tsa(0.05)),
    ];
    let st = [0.75, 0.5, 0.35].map(|t| (StraightThrough, "", t));
    let scaled = [0.5, 0.35].map(|t| (StraightThroughScaled, " ×(1−p)", t));
    arms.extend(st.into_iter().chain(scaled).map(|(gate, scale, t)| {
        arm(
            format!("TSA straight-through{scale} α*={t}"),
            gated(gate, t),
        )
    }));
    // The same gate trained skipping what it halts: its "train s" column is the speed-up.
    arms.push(ArmSpec {
        skip_halted: true,
        ..arm(
            "TSA straight-through ×(1−p) α*=0.5, halted skip in training",
            gated(StraightThroughScaled, 0.5),
        )
    });
    arms.push(arm("TSA Gumbel α*=0.5", gated(Gumbel, 0.5)));
    arms.push(arm("Early Exit", Routing::EarlyExit));
    arms.extend([0.75, 0.5].map(|c| {
        arm(
            format!("MoD c={c}"),
            Routing::MixtureOfDepths { capacity: c },
        )
    }));
    TableSpec {
        arms,
        note: "(not in the paper: it reports soft α only; TSA 1.4482 at soft α 0.726, early exit 1.4586 at α 0.728)",
        plot: Some(Plot::Pareto),
        ..TableSpec::on(LM)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsa_core::metrics;

    const TABLES: [Table; 6] = [
        Table::Table1,
        Table::Table2,
        Table::Table4,
        Table::Table6,
        Table::Table7,
        Table::Pareto,
    ];

    #[test]
    fn every_arm_builds_a_valid_model_and_schedule_at_both_scales() {
        let device = burn::tensor::Device::flex();
        for table in TABLES {
            let spec = table.spec();
            assert!(!spec.arms.is_empty(), "{table:?} has no arms");
            for arm in &spec.arms {
                for scale in [Scale::Quick, Scale::Paper] {
                    let r = arm.recipe(spec.recipes.at(scale)(65, arm.routing));
                    let what = format!("{table:?} {scale:?} {}", arm.label);
                    assert_eq!(r.model.routing, arm.routing, "{what}");
                    r.model.validate().unwrap_or_else(|e| panic!("{what}: {e}"));
                    r.train.validate().unwrap_or_else(|e| panic!("{what}: {e}"));
                }
                // Quick scale is small enough to build every arm for real.
                let quick = arm.recipe(spec.recipes.at(Scale::Quick)(65, arm.routing));
                let model = quick.model.init(&device).expect("init");
                assert_eq!(!model.routers.is_empty(), arm.routing.has_routers());
            }
        }
    }

    #[test]
    fn the_paper_numbers_print_as_the_paper_and_the_reports_always_did() {
        let md = |t: Table| t.spec().paper_md();
        assert_eq!(
            md(Table::Table1),
            "| Copy | Baseline | 1.0000 | 1.012 | 1.000 | — |\n| Copy | TSA | 1.0000 | 1.012 | 0.341 | 54.9% |\n| Sort | Baseline | 0.9915 | 1.079 | 1.000 | — |\n| Sort | TSA | 0.9878 | 1.087 | 0.730 | 22.5% |"
        );
        assert_eq!(
            md(Table::Table2),
            "| Baseline | 4,782,336 | 1.4422 | 2.0807 | 1.000 | — |\n| TSA | 4,864,901 | 1.4482 | 2.0893 | 0.726 | 22.8% |"
        );
        assert_eq!(
            md(Table::Table4),
            "| Baseline | 1.4422 | 2.0807 | 1.000 | — |\n| TSA | 1.4482 | 2.0893 | 0.726 | 22.8% |\n| Early Exit | 1.4586 | 2.1043 | 0.728 | 22.7% |"
        );
        for t in [Table::Table6, Table::Table7, Table::Pareto] {
            assert_eq!(md(t), t.spec().note, "{t:?} has prose only");
        }
    }

    /// The paper's headers, and a row for every arm of the tables it prints rows for.
    #[test]
    fn the_paper_columns_are_its_headers_and_every_row_fills_them() {
        use Column::*;
        let headers: [(Table, &[Column]); 6] = [
            (
                Table::Table1,
                &[Task, Model, Accuracy, Perplexity, Alpha, Saved],
            ),
            (Table::Table2, &[Model, Params, ValLoss, Bpc, Alpha, Saved]),
            (Table::Table4, &[Model, ValLoss, Bpc, Alpha, Saved]),
            (Table::Table6, &[]),
            (Table::Table7, &[]),
            (Table::Pareto, &[]),
        ];
        for (table, header) in headers {
            let spec = table.spec();
            assert_eq!(spec.columns(), header, "{table:?}");
            let rows = spec.published().count();
            assert_eq!(
                rows,
                if header.is_empty() {
                    0
                } else {
                    spec.arms.len()
                }
            );
            for (arm, p) in spec.published() {
                for c in header {
                    let dash = c.value(arm, p).is_none();
                    // Only dense saves nothing (the paper's "—").
                    let dense = *c == Saved && p.alpha == Some(1.0);
                    assert_eq!(dash, dense, "{table:?} {}: {c:?}", arm.label);
                }
            }
        }
    }

    /// Catches a mistyped copy: the paper's columns follow from one another (TLOps saved from α
    /// over its L = 6 blocks, BPC from the loss).
    #[test]
    fn published_numbers_are_consistent() {
        for table in TABLES {
            let spec = table.spec();
            let layers = spec.recipes.at(Scale::Paper)(65, Routing::Dense)
                .model
                .n_layers;
            for arm in &spec.arms {
                let what = format!("{table:?} {}", arm.label);
                let Some(p) = arm.paper else { continue };
                if let (Some(alpha), Some(s)) = (p.alpha, p.saved) {
                    let derived = 100.0 * metrics::tlops_saved(alpha, layers);
                    assert!(
                        (s - derived).abs() <= 0.05 + 1e-9,
                        "{what}: {s} vs {derived}"
                    );
                }
                if let (Some(loss), Some(bpc)) = (p.val_loss, p.bpc) {
                    assert!(
                        (bpc - metrics::bpc(loss)).abs() <= 5e-5 + 1e-9,
                        "{what}: BPC"
                    );
                }
            }
        }
        let t4 = Table::Table4.spec();
        let tsa = t4
            .arms
            .iter()
            .find(|a| a.label == MATCHED_ARM)
            .expect("TSA");
        assert_eq!(tsa.paper.and_then(|p| p.alpha), Some(MATCHED_ALPHA));
    }

    #[test]
    fn the_sweeps_keep_their_arms() {
        let labels =
            |t: Table| -> Vec<String> { t.spec().arms.into_iter().map(|a| a.label).collect() };
        assert_eq!(
            labels(Table::Table6).join(", "),
            "TSA λ=0, TSA λ=0.001, TSA λ=0.005, TSA λ=0.01, TSA λ=0.05, TSA λ=0.1, TSA λ=0.5"
        );
        assert_eq!(
            labels(Table::Pareto).join(", "),
            "Baseline, Baseline L=4, Baseline L=3, TSA (paper, λ=0.001), TSA (paper, λ=0.05), TSA straight-through α*=0.75, \
             TSA straight-through α*=0.5, TSA straight-through α*=0.35, \
             TSA straight-through ×(1−p) α*=0.5, TSA straight-through ×(1−p) α*=0.35, \
             TSA straight-through ×(1−p) α*=0.5, halted skip in training, \
             TSA Gumbel α*=0.5, Early Exit, MoD c=0.75, MoD c=0.5"
        );
    }
}
