//! A small SVG line chart: a few series over training steps, axes labelled with their ranges.

use leptos::prelude::*;

const W: f64 = 320.0;
const H: f64 = 140.0;
const PAD: f64 = 28.0;

#[derive(Clone)]
pub struct Series {
    pub name: &'static str,
    pub color: &'static str,
    pub points: Signal<Vec<(f64, f64)>>,
}

fn bounds(all: &[Vec<(f64, f64)>]) -> Option<(f64, f64, f64, f64)> {
    let pts = all
        .iter()
        .flatten()
        .filter(|(x, y)| x.is_finite() && y.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    let mut any = false;
    for &(x, y) in pts {
        any = true;
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if !any {
        return None;
    }
    if x1 - x0 < 1e-9 {
        x1 = x0 + 1.0;
    }
    if y1 - y0 < 1e-9 {
        (y0, y1) = (y0 - 0.5, y1 + 0.5);
    }
    Some((x0, x1, y0, y1))
}

#[component]
pub fn LineChart(title: &'static str, series: Vec<Series>) -> impl IntoView {
    let legend = series
        .iter()
        .map(|s| view! { <span class="legend" style=format!("color: {}", s.color)>{"■ "}{s.name}</span> })
        .collect_view();
    let plot = move || {
        let data: Vec<Vec<(f64, f64)>> = series.iter().map(|s| s.points.get()).collect();
        let Some((x0, x1, y0, y1)) = bounds(&data) else {
            return view! { <text x="60" y="70" class="muted">"no data yet"</text> }.into_any();
        };
        let sx = move |x: f64| PAD + (x - x0) / (x1 - x0) * (W - PAD - 8.0);
        let sy = move |y: f64| H - PAD + 8.0 - (y - y0) / (y1 - y0) * (H - PAD - 4.0);
        let lines = data
            .iter()
            .zip(&series)
            .map(|(pts, s)| {
                let d = pts
                    .iter()
                    .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
                    .collect::<Vec<_>>()
                    .join(" ");
                view! { <polyline points=d fill="none" stroke=s.color stroke-width="1.5" /> }
            })
            .collect_view();
        view! {
            <g>
                {lines}
                <text x="2" y="12" class="axis">{format!("{y1:.3}")}</text>
                <text x="2" y=format!("{}", H - PAD + 8.0) class="axis">{format!("{y0:.3}")}</text>
                <text x=format!("{}", PAD) y=format!("{}", H - 4.0) class="axis">{format!("{x0:.0}")}</text>
                <text x=format!("{}", W - 40.0) y=format!("{}", H - 4.0) class="axis">{format!("step {x1:.0}")}</text>
            </g>
        }
        .into_any()
    };
    view! {
        <figure class="chart">
            <figcaption>{title}" "{legend}</figcaption>
            <svg viewBox=format!("0 0 {W} {H}") width=W.to_string() height=H.to_string()>{plot}</svg>
        </figure>
    }
}
