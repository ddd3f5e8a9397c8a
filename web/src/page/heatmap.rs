//! Text rendered character by character, coloured by (1 − p_l) per router (the paper's Figure 4),
//! with a tooltip giving p_l at every router for the hovered or focused character.
//!
//! Long passages are thousands of spans, so the rows are written as one HTML string (the browser
//! parses that in a few milliseconds) and one listener on the container finds the character.

use std::fmt::Write;

use leptos::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{Element, HtmlElement};

use crate::protocol::TokenView;

/// The inference rule (§3.6): block l+1 runs for a character when p_l ≤ 0.5.
pub fn runs(p: f32) -> bool {
    p as f64 <= tsa_core::routing::HALT_THRESHOLD
}

/// Characters per line of the heatmap: each line shows its text once per router.
const LINE: usize = 64;

/// The hovered character and where to draw its tooltip (offsets inside the heatmap).
#[derive(Debug, Clone, PartialEq)]
struct Hover {
    token: TokenView,
    x: f64,
    y: f64,
}

fn visible(ch: char, out: &mut String) {
    match ch {
        '\n' => out.push('⏎'),
        ' ' => out.push('\u{00a0}'),
        '&' => out.push_str("&amp;"),
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        '"' => out.push_str("&quot;"),
        c => out.push(c),
    }
}

/// How much of block l+1 the character received: 1 − p_l, or (`executed`) 1 if p_l ≤ 0.5 ran it.
fn share(p: f32, executed: bool) -> f32 {
    match executed {
        true => f32::from(u8::from(runs(p))),
        false => (1.0 - p).clamp(0.0, 1.0),
    }
}

/// The rows as HTML: per line of text, one row per router (a plain text row for a dense model).
/// The first router's row carries each character's `data-p` and is the one reachable by Tab.
fn rows_html(tokens: &[TokenView], executed: bool) -> String {
    let routers = tokens.iter().map(|t| t.p.len()).max().unwrap_or(0);
    let mut html = String::with_capacity(tokens.len() * routers.max(1) * 80);
    for line in tokens.chunks(LINE) {
        html.push_str("<div class=\"heat-line\">");
        for r in 0..routers.max(1) {
            let label = match routers {
                0 => "text".to_string(),
                _ => format!("router {r}"),
            };
            let _ = write!(
                html,
                "<div class=\"heat-row\"><span class=\"heat-label\">{label}</span><span class=\"heat-text\">"
            );
            for t in line {
                let _ = write!(
                    html,
                    "<span class=\"tok\" data-testid=\"token\" data-index=\"{}\"",
                    t.index
                );
                if r == 0 {
                    let p: Vec<String> = t.p.iter().map(|p| format!("{p:.4}")).collect();
                    let _ = write!(html, " tabindex=\"0\" data-p=\"{}\"", p.join(","));
                }
                if let Some(&p) = t.p.get(r) {
                    let _ = write!(html, " style=\"--a:{:.3}\"", share(p, executed));
                }
                html.push('>');
                visible(t.ch, &mut html);
                html.push_str("</span>");
            }
            html.push_str("</span></div>");
        }
        html.push_str("</div>");
    }
    html
}

/// Replaces the rows' HTML, keeping keyboard focus on the same character: the rebuild destroys
/// the focused span, which would throw a keyboard user back to the page's start at every
/// evaluation. Focus elsewhere on the page is left where it is.
fn replace_rows(rows: &HtmlElement, html: &str) {
    let focused = document()
        .active_element()
        .filter(|e| rows.contains(Some(e)))
        .and_then(|e| e.get_attribute("data-index"));
    rows.set_inner_html(html);
    let again = focused
        .and_then(|i| {
            rows.query_selector(&format!("[data-index=\"{i}\"][tabindex]"))
                .ok()?
        })
        .and_then(|span| span.dyn_into::<HtmlElement>().ok());
    if let Some(span) = again {
        let _ = span.focus();
    }
}

/// The character under `ev`'s target, with its position relative to `wrapper`.
fn hovered(ev: &web_sys::Event, wrapper: &HtmlElement, tokens: &[TokenView]) -> Option<Hover> {
    let target: Element = ev.target()?.dyn_into().ok()?;
    let span = target.closest("[data-index]").ok()??;
    let index: usize = span.get_attribute("data-index")?.parse().ok()?;
    let token = tokens.get(index)?.clone();
    let (s, w) = (
        span.get_bounding_client_rect(),
        wrapper.get_bounding_client_rect(),
    );
    Some(Hover {
        token,
        x: s.left() - w.left(),
        y: s.bottom() - w.top(),
    })
}

#[component]
pub fn Heatmap(
    #[prop(into)] tokens: Signal<Vec<TokenView>>,
    #[prop(into)] testid: String,
    #[prop(into)] empty: String,
    /// Shade by what ran (p ≤ 0.5) instead of by 1 − p.
    #[prop(into)]
    executed: Signal<bool>,
) -> impl IntoView {
    let hover = RwSignal::new(None::<Hover>);
    let wrapper = NodeRef::<leptos::html::Div>::new();
    let show = move |ev: &web_sys::Event| {
        let Some(w) = wrapper.get_untracked() else {
            return;
        };
        let h = tokens.with_untracked(|t| hovered(ev, &w, t));
        if h.is_some() {
            hover.set(h);
        }
    };
    // New probabilities under a tooltip that stays open (a still mouse, a focused character):
    // it shows the new numbers for the same position, not the last evaluation's.
    Effect::new(move || {
        let fresh = tokens.with(|t| {
            hover.with_untracked(|h| h.as_ref().and_then(|h| t.get(h.token.index).cloned()))
        });
        if let Some(token) = fresh {
            hover.update(|h| {
                if let Some(h) = h.as_mut().filter(|h| h.token != token) {
                    h.token = token;
                }
            });
        }
    });
    let rows = NodeRef::<leptos::html::Div>::new();
    Effect::new(move || {
        // Tracks the node too: the rows are (re)mounted when the first tokens arrive.
        let Some(el) = rows.get() else { return };
        let html = tokens.with(|t| rows_html(t, executed.get()));
        replace_rows(&el, &html);
    });
    view! {
        <div class="heatmap" data-testid=testid node_ref=wrapper>
            <Show
                when=move || tokens.with(|t| !t.is_empty())
                fallback=move || view! { <p class="muted">{empty.clone()}</p> }
            >
                <div
                    class="heat-rows"
                    node_ref=rows
                    on:mouseover=move |ev| show(&ev)
                    on:focusin=move |ev| show(&ev)
                    on:mouseleave=move |_| hover.set(None)
                    on:focusout=move |_| hover.set(None)
                ></div>
            </Show>
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
            let style = format!("left: {:.0}px; top: {:.0}px", h.x, h.y + 4.0);
            view! {
                <div class="tooltip" data-testid="tooltip" role="tooltip" style=style>
                    <div class="tip-head">{format!("{:?} at position {}", t.ch, t.index)}</div>
                    {rows}
                </div>
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    /// One token per character of `text`, with `p(index)` at its routers.
    fn tokens(text: &str, p: impl Fn(usize) -> Vec<f32>) -> Vec<TokenView> {
        let token = |(index, ch)| TokenView {
            index,
            ch,
            p: p(index),
        };
        text.chars().enumerate().map(token).collect()
    }

    #[wasm_bindgen_test]
    fn rows_carry_one_span_per_character_and_router_and_escape_text() {
        let tokens = tokens("a<b\n", |_| vec![0.25, 0.75]);
        let html = rows_html(&tokens, false);
        assert_eq!(html.matches("data-testid=\"token\"").count(), 8);
        assert_eq!(html.matches("data-p=\"0.2500,0.7500\"").count(), 4);
        assert!(html.contains("&lt;") && !html.contains("<b"));
        assert!(html.contains("--a:0.750") && html.contains("--a:0.250"));
        let executed = rows_html(&tokens, true);
        assert!(executed.contains("--a:1.000") && executed.contains("--a:0.000"));
    }

    fn element<T: JsCast>(tag: &str) -> T {
        let el = document().create_element(tag).expect("create element");
        document()
            .body()
            .expect("body")
            .append_child(&el)
            .expect("attach");
        el.dyn_into().expect("element type")
    }

    #[wasm_bindgen_test]
    fn a_rebuild_keeps_keyboard_focus_on_the_same_character_and_takes_none() {
        let tokens = tokens("to be, or not", |i| vec![0.1 * (i % 10) as f32, 0.5]);
        let rows: HtmlElement = element("div");
        replace_rows(&rows, &rows_html(&tokens, false));
        let span: HtmlElement = rows
            .query_selector("[data-index=\"7\"][tabindex]")
            .expect("selector")
            .expect("span 7")
            .dyn_into()
            .expect("html element");
        span.focus().expect("focus");
        replace_rows(&rows, &rows_html(&tokens, true));
        let active = document().active_element().expect("something has focus");
        assert!(
            !active.is_same_node(Some(&span)),
            "the old span was replaced"
        );
        assert_eq!(active.get_attribute("data-index").as_deref(), Some("7"));
        assert!(
            active.has_attribute("tabindex"),
            "the first router's row, reachable by Tab"
        );
        // Focus outside the rows stays outside.
        let input: HtmlElement = element("input");
        input.focus().expect("focus");
        replace_rows(&rows, &rows_html(&tokens, false));
        let active = document().active_element().expect("something has focus");
        assert!(
            active.is_same_node(Some(&input)),
            "a rebuild took the focus"
        );
        rows.remove();
        input.remove();
    }
}
