//! Text rendered character by character, coloured by (1 − p_l) per router (the paper's Figure 4),
//! with a tooltip giving p_l at every router for the hovered or focused character.

use leptos::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::HtmlElement;

use crate::session::TokenView;

/// The hovered character and where to draw its tooltip (offsets inside the heatmap).
#[derive(Debug, Clone, PartialEq)]
pub struct Hover {
    pub token: TokenView,
    pub x: i32,
    pub y: i32,
}

fn visible(ch: char) -> String {
    match ch {
        '\n' => "⏎".into(),
        ' ' => "\u{00a0}".into(),
        c => c.to_string(),
    }
}

/// Background for a character: the computation it received at router `l`, (1 − p_l).
fn shade(token: &TokenView, l: Option<usize>) -> String {
    match l.and_then(|l| token.p.get(l)) {
        Some(&p) => format!(
            "background: rgba(214, 86, 28, {:.3})",
            (1.0 - p).clamp(0.0, 1.0)
        ),
        None => String::new(),
    }
}

fn show(hover: RwSignal<Option<Hover>>, token: TokenView, ev: &web_sys::Event) {
    let (x, y) = ev
        .current_target()
        .and_then(|t| t.dyn_into::<HtmlElement>().ok())
        .map_or((0, 0), |el| {
            (el.offset_left(), el.offset_top() + el.offset_height())
        });
    hover.set(Some(Hover { token, x, y }));
}

#[component]
fn Row(
    tokens: Vec<TokenView>,
    router: Option<usize>,
    hover: RwSignal<Option<Hover>>,
) -> impl IntoView {
    let label = router.map_or("text".to_string(), |l| format!("router {l}"));
    view! {
        <div class="heat-row">
            <span class="heat-label">{label}</span>
            <span class="heat-text">
                {tokens
                    .into_iter()
                    .map(|t| {
                        let p = t.p.iter().map(|p| format!("{p:.4}")).collect::<Vec<_>>().join(",");
                        let (enter, focus) = (t.clone(), t.clone());
                        view! {
                            <span
                                class="tok"
                                tabindex="0"
                                data-testid="token"
                                data-index=t.index.to_string()
                                data-p=p
                                style=shade(&t, router)
                                on:mouseenter=move |ev| show(hover, enter.clone(), &ev)
                                on:focus=move |ev| show(hover, focus.clone(), &ev)
                                on:mouseleave=move |_| hover.set(None)
                                on:blur=move |_| hover.set(None)
                            >
                                {visible(t.ch)}
                            </span>
                        }
                    })
                    .collect_view()}
            </span>
        </div>
    }
}

#[component]
pub fn Heatmap(
    tokens: RwSignal<Vec<TokenView>>,
    #[prop(into)] testid: String,
    #[prop(into)] empty: String,
) -> impl IntoView {
    let hover = RwSignal::new(None::<Hover>);
    view! {
        <div class="heatmap" data-testid=testid>
            {move || {
                let toks = tokens.get();
                if toks.is_empty() {
                    return view! { <p class="muted">{empty.clone()}</p> }.into_any();
                }
                let routers = toks.iter().map(|t| t.p.len()).max().unwrap_or(0);
                let rows: Vec<Option<usize>> = match routers {
                    0 => vec![None],
                    n => (0..n).map(Some).collect(),
                };
                rows.into_iter()
                    .map(|r| view! { <Row tokens=toks.clone() router=r hover=hover /> })
                    .collect_view()
                    .into_any()
            }}
            <Tooltip hover=hover />
        </div>
    }
}

#[component]
fn Tooltip(hover: RwSignal<Option<Hover>>) -> impl IntoView {
    move || {
        hover.get().map(|h| {
            let t = h.token;
            let rows = match t.p.is_empty() {
                true => view! { <p>"dense model: no routers"</p> }.into_any(),
                false => {
                    t.p.iter()
                        .enumerate()
                        .map(|(l, &p)| {
                            let width = format!("width: {:.0}px", (p.clamp(0.0, 1.0) * 80.0));
                            view! {
                                <div class="tip-row">
                                    <span>{format!("p{l} = {p:.3}")}</span>
                                    <span class="bar"><span class="fill" style=width></span></span>
                                </div>
                            }
                        })
                        .collect_view()
                        .into_any()
                }
            };
            let style = format!("left: {}px; top: {}px", h.x, h.y + 4);
            view! {
                <div class="tooltip" data-testid="tooltip" role="tooltip" style=style>
                    <div class="tip-head">{format!("{:?} at position {}", t.ch, t.index)}</div>
                    {rows}
                </div>
            }
        })
    }
}
