//! Writing results: markdown tables on stdout and in `results/`, JSON lines, SVG plots.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use plotters::prelude::*;

/// The folder a command writes its reports into (`--out` where it names a folder), made if
/// missing.
pub fn results_dir(dir: &Path) -> Result<PathBuf> {
    if dir.is_file() {
        anyhow::bail!(
            "--out {} is a file; this command writes several reports and takes a folder",
            dir.display()
        );
    }
    fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the folder {}", dir.display()))?;
    Ok(dir.to_path_buf())
}

/// A markdown table from a header and rows of cells.
pub fn markdown(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = format!(
        "| {} |\n|{}\n",
        header.join(" | "),
        header.iter().map(|_| " --- |").collect::<String>()
    );
    for r in rows {
        s.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    s
}

pub fn write(path: &Path, contents: &str) -> Result<()> {
    fs::write(path, contents).with_context(|| format!("cannot write {}", path.display()))
}

pub fn json_lines<T: serde::Serialize>(items: &[T]) -> Result<String> {
    let mut s = String::new();
    for it in items {
        s.push_str(&serde_json::to_string(it)?);
        s.push('\n');
    }
    Ok(s)
}

/// One named series of (x, y) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart (or a scatter with lines between points) as SVG.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<()> {
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    if all.is_empty() {
        return Ok(());
    }
    let pad = |lo: f64, hi: f64| {
        if (hi - lo).abs() < 1e-12 {
            (lo - 0.5, hi + 0.5)
        } else {
            (lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
        }
    };
    let (x0, x1) = pad(
        all.iter().map(|p| p.0).fold(f64::INFINITY, f64::min),
        all.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max),
    );
    let (y0, y1) = pad(
        all.iter().map(|p| p.1).fold(f64::INFINITY, f64::min),
        all.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max),
    );
    // The legend gets its own column to the right, so that it never covers a point.
    // About 7 px per character of 13 px text, the longest name setting the column's width.
    let longest = series
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0);
    let legend_width = 40 + 7 * longest as u32;
    let root = SVGBackend::new(path, (760 + legend_width, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (plot, legend) = root.split_horizontally(760);
    let mut chart = ChartBuilder::on(&plot)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(s.points.clone(), color.stroke_width(2)))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let y = 48 + 20 * i as i32;
        legend
            .draw(&PathElement::new(
                vec![(4, y), (22, y)],
                color.stroke_width(2),
            ))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        legend
            .draw(&Text::new(
                s.name.clone(),
                (28, y - 7),
                ("sans-serif", 13).into_font(),
            ))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}
