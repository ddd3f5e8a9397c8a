//! Where the computation goes: the validation passage's heatmap, a histogram of p per router
//! (does the router decide, or hover near its initial σ(−1) ≈ 0.27?), and compute per kind of
//! character — all from the passage's probabilities, so the three views agree with each other.

use leptos::prelude::*;
use tsa_core::char_class::{CLASSES, class};
use tsa_core::metrics::{HIST_BINS, histogram};

use super::Ctx;
use super::heatmap::{Heatmap, runs};
use super::stats::fmt;
use crate::protocol::TokenView;

/// Per router, the share of the passage's characters in each tenth of p.
pub fn histograms(tokens: &[TokenView]) -> Vec<Vec<f64>> {
    let routers = tokens.iter().map(|t| t.p.len()).max().unwrap_or(0);
    (0..routers)
        .map(|l| {
            histogram(
                &tokens
                    .iter()
                    .filter_map(|t| t.p.get(l).copied())
                    .collect::<Vec<_>>(),
            )
        })
        .collect()
}

/// Share of the passage's token-layer decisions that run (p ≤ 0.5); None without routers.
pub fn executed_alpha(tokens: &[TokenView]) -> Option<f64> {
    let all: Vec<f32> = tokens.iter().flat_map(|t| t.p.iter().copied()).collect();
    (!all.is_empty()).then(|| all.iter().filter(|&&p| runs(p)).count() as f64 / all.len() as f64)
}

/// One kind of character: how many, and the mean (1 − p_l) it received at each router.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassRow {
    pub class: &'static str,
    pub count: usize,
    pub active: Vec<f64>,
}

pub fn classes(tokens: &[TokenView]) -> Vec<ClassRow> {
    let routers = tokens.iter().map(|t| t.p.len()).max().unwrap_or(0);
    let mut rows: Vec<ClassRow> = CLASSES
        .iter()
        .map(|&class| ClassRow {
            class,
            count: 0,
            active: vec![0.0; routers],
        })
        .collect();
    let mut prev = None;
    for t in tokens {
        let row = &mut rows[class(prev, t.ch)];
        row.count += 1;
        for (a, p) in row.active.iter_mut().zip(&t.p) {
            *a += 1.0 - *p as f64;
        }
        prev = Some(t.ch);
    }
    rows.retain(|r| r.count > 0);
    for r in &mut rows {
        r.active.iter_mut().for_each(|a| *a /= r.count as f64);
    }
    rows
}

#[component]
pub fn Routing() -> impl IntoView {
    let run = Ctx::use_context().state.run;
    // A memo: the heatmap re-renders when the passage changes, not on every step.
    let passage = Memo::new(move |_| run.with(|r| r.passage.clone()));
    view! {
        <section>
            <h2>"Where the computation goes"</h2>
            <p class="muted">
                "A validation passage, one row per router l: the darker a character, the more of block l+1's update it received (1 − p"
                <sub>"l"</sub>"). Hover or focus a character for p at every router."
            </p>
            <Heatmap tokens=passage executed=Signal::derive(|| false) testid="heatmap" empty="Start training to see the routing." />
            <Show when=move || passage.with(|p| p.iter().any(|t| !t.p.is_empty()))>
                <div class="routing-summary">
                    <Histogram tokens=passage />
                    <ClassSummary tokens=passage />
                </div>
            </Show>
        </section>
    }
}

#[component]
fn Histogram(tokens: Memo<Vec<TokenView>>) -> impl IntoView {
    let rows = move || {
        tokens
            .with(|t| histograms(t))
            .into_iter()
            .enumerate()
            .map(|(l, bins)| {
                let bars = bins
                    .iter()
                    .enumerate()
                    .map(|(k, share)| {
                        let title = format!(
                            "p in [{:.1}, {:.1}): {:.1}%",
                            k as f64 / HIST_BINS as f64,
                            (k + 1) as f64 / HIST_BINS as f64,
                            100.0 * share
                        );
                        let class = if k < HIST_BINS / 2 {
                            "hist-bar runs"
                        } else {
                            "hist-bar halts"
                        };
                        view! {
                            <span class=class title=title data-share=format!("{share:.6}")
                                style=format!("height: {:.1}px", 2.0 + 46.0 * share)></span>
                        }
                    })
                    .collect_view();
                view! {
                    <div class="hist-row" data-router=l.to_string()>
                        <span class="heat-label">{format!("router {l}")}</span>
                        <span class="hist-bars">{bars}</span>
                    </div>
                }
            })
            .collect_view()
    };
    view! {
        <figure class="histogram" data-testid="histogram">
            <figcaption>
                "p per router, from 0 (runs) to 1 (skips); executed α of the passage "
                <strong data-testid="passage-executed-alpha">
                    {move || fmt(tokens.with(|t| executed_alpha(t)), 3)}
                </strong>
            </figcaption>
            {rows}
        </figure>
    }
}

#[component]
fn ClassSummary(tokens: Memo<Vec<TokenView>>) -> impl IntoView {
    let table = move || {
        let rows = tokens.with(|t| classes(t));
        let routers = rows.first().map_or(0, |r| r.active.len());
        let head = (0..routers)
            .map(|l| view! { <th>{format!("1 − p{l}")}</th> })
            .collect_view();
        let body = rows
            .into_iter()
            .map(|r| {
                let cells = r
                    .active
                    .iter()
                    .map(|a| view! { <td>{format!("{a:.2}")}</td> })
                    .collect_view();
                view! { <tr><th>{r.class}</th><td>{r.count.to_string()}</td>{cells}</tr> }
            })
            .collect_view();
        view! {
            <table class="classes" data-testid="class-summary">
                <thead><tr><th>"character"</th><th>"count"</th>{head}</tr></thead>
                <tbody>{body}</tbody>
            </table>
        }
    };
    view! { <div class="class-summary">{table}</div> }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn tokens(text: &str, p: &[[f32; 2]]) -> Vec<TokenView> {
        text.chars()
            .zip(p)
            .enumerate()
            .map(|(index, (ch, p))| TokenView {
                index,
                ch,
                p: p.to_vec(),
            })
            .collect()
    }

    #[wasm_bindgen_test]
    fn summaries_agree_with_the_probabilities() {
        let t = tokens("Ab c", &[[0.1, 0.9], [0.3, 0.7], [0.6, 0.2], [0.5, 0.5]]);
        assert_eq!(executed_alpha(&t), Some(5.0 / 8.0));
        let h = histograms(&t);
        assert_eq!(h.len(), 2);
        assert!((h[0][1] - 0.25).abs() < 1e-12 && (h[0][5] - 0.25).abs() < 1e-12);
        let rows = classes(&t);
        let names: Vec<&str> = rows.iter().map(|r| r.class).collect();
        assert_eq!(
            names,
            ["space", "capital", "word-initial letter", "mid-word letter"]
        );
        let capital = &rows[1];
        assert_eq!(capital.count, 1);
        assert!((capital.active[0] - 0.9).abs() < 1e-6 && (capital.active[1] - 0.1).abs() < 1e-6);
        assert_eq!(executed_alpha(&tokens("ab", &[])), None);
    }
}
