//! The report as a document: sections of paragraphs, notes, tables and plots,
//! rendered twice from the same blocks, as self-contained HTML (plots inline
//! as SVG, no scripts, no network) and as Markdown (the same tables, plots
//! referred to the HTML file). Every piece of text put into HTML is escaped
//! here and only here.

use std::fmt::Write;

/// A table of text cells; `numeric` columns are right-aligned.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub headers: Vec<String>,
    pub numeric: Vec<bool>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these headers; a header ending in `#` or starting with a
    /// unit-bearing word is not special: say which columns are numeric with
    /// [`Table::numeric_cols`].
    pub fn new<S: Into<String>>(headers: impl IntoIterator<Item = S>) -> Self {
        let headers: Vec<String> = headers.into_iter().map(Into::into).collect();
        Table {
            numeric: vec![false; headers.len()],
            headers,
            rows: Vec::new(),
        }
    }

    /// Marks columns (by index) as numeric.
    pub fn numeric_cols(mut self, cols: &[usize]) -> Self {
        for &c in cols {
            if let Some(n) = self.numeric.get_mut(c) {
                *n = true;
            }
        }
        self
    }

    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }
}

/// One piece of a section.
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    Heading(String),
    Paragraph(String),
    /// A caveat the reader must see (e.g. software counters only).
    Note(String),
    /// A section or subsection without data: says so instead of an empty plot.
    Empty(String),
    Table(Table),
    /// A table collapsed in HTML (`<details>`), shown in full in Markdown.
    Details(String, Table),
    Plot {
        /// A stable id, e.g. `roofline`, `heatmap-3`.
        id: String,
        svg: String,
        caption: String,
    },
}

/// A titled part of the report.
#[derive(Clone, Debug, PartialEq)]
pub struct Section {
    pub id: String,
    pub title: String,
    pub blocks: Vec<Block>,
}

/// The whole report.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    pub title: String,
    pub meta: String,
    pub sections: Vec<Section>,
}

/// Escapes text for HTML element content and double-quoted attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes a Markdown table cell: pipes would end the cell, newlines the row,
/// and `<` would open raw HTML in most renderers.
pub fn md_cell(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace('<', "&lt;")
        .replace(['\n', '\r'], " ")
}

/// Escapes Markdown prose: `<` would open raw HTML in most renderers.
pub fn md_text(s: &str) -> String {
    s.replace('<', "&lt;")
}

/// The SVG as plotters wrote it, minus any XML prolog, with a role and a
/// label so the figure is accessible.
fn inline_svg(svg: &str, label: &str) -> String {
    let body = match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    };
    body.replacen(
        "<svg",
        &format!("<svg role=\"img\" aria-label=\"{}\"", escape(label)),
        1,
    )
}

const TEMPLATE: &str = include_str!("report.html");

impl Document {
    /// The self-contained HTML page.
    pub fn to_html(&self) -> String {
        let mut nav = String::new();
        let mut body = String::new();
        for s in &self.sections {
            let _ = write!(
                nav,
                "<li><a href=\"#{}\">{}</a></li>",
                escape(&s.id),
                escape(&s.title)
            );
            let _ = writeln!(
                body,
                "<section id=\"{}\">\n<h2>{}</h2>",
                escape(&s.id),
                escape(&s.title)
            );
            for b in &s.blocks {
                html_block(&mut body, b);
            }
            body.push_str("</section>\n");
        }
        // Fill the body last: plot SVGs could contain `{{…}}` text.
        TEMPLATE
            .replace("{{title}}", &escape(&self.title))
            .replace("{{meta}}", &escape(&self.meta))
            .replace("{{nav}}", &nav)
            .replace("{{body}}", &body)
    }

    /// The Markdown summary: the same sections and tables, plots by reference.
    pub fn to_markdown(&self) -> String {
        let mut out = format!("# {}\n\n{}\n", md_text(&self.title), md_text(&self.meta));
        for s in &self.sections {
            let _ = write!(out, "\n## {}\n", md_text(&s.title));
            for b in &s.blocks {
                match b {
                    Block::Heading(h) => {
                        let _ = write!(out, "\n### {}\n", md_text(h));
                    }
                    Block::Paragraph(p) => {
                        let _ = write!(out, "\n{}\n", md_text(p));
                    }
                    Block::Note(n) => {
                        let _ = write!(out, "\n> **Note:** {}\n", md_text(n));
                    }
                    Block::Empty(e) => {
                        let _ = write!(out, "\n_{}_\n", md_text(e));
                    }
                    Block::Table(t) => md_table(&mut out, t),
                    Block::Details(summary, t) => {
                        let _ = write!(out, "\n{}:\n", md_text(summary));
                        md_table(&mut out, t);
                    }
                    Block::Plot { caption, .. } => {
                        let _ = write!(out, "\n_Plot in report.html: {}_\n", md_text(caption));
                    }
                }
            }
        }
        out
    }

    /// How many plots the document holds.
    pub fn plot_ids(&self) -> Vec<&str> {
        self.sections
            .iter()
            .flat_map(|s| &s.blocks)
            .filter_map(|b| match b {
                Block::Plot { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect()
    }
}

fn html_block(out: &mut String, b: &Block) {
    match b {
        Block::Heading(h) => {
            let _ = writeln!(out, "<h3>{}</h3>", escape(h));
        }
        Block::Paragraph(p) => {
            let _ = writeln!(out, "<p>{}</p>", escape(p));
        }
        Block::Note(n) => {
            let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(n));
        }
        Block::Empty(e) => {
            let _ = writeln!(out, "<p class=\"empty\">{}</p>", escape(e));
        }
        Block::Table(t) => html_table(out, t),
        Block::Details(summary, t) => {
            let _ = writeln!(out, "<details><summary>{}</summary>", escape(summary));
            html_table(out, t);
            out.push_str("</details>\n");
        }
        Block::Plot { id, svg, caption } => {
            let _ = writeln!(
                out,
                "<figure class=\"plot\" id=\"plot-{}\" data-plot=\"{}\">\n{}\n<figcaption>{}</figcaption>\n</figure>",
                escape(id),
                escape(id),
                inline_svg(svg, caption),
                escape(caption)
            );
        }
    }
}

fn html_table(out: &mut String, t: &Table) {
    // Wide tables (PMU columns) scroll inside the page instead of widening it.
    out.push_str("<div class=\"tablewrap\"><table>\n<thead><tr>");
    for h in &t.headers {
        let _ = write!(out, "<th>{}</th>", escape(h));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for r in &t.rows {
        out.push_str("<tr>");
        for (i, c) in r.iter().enumerate() {
            let class = if t.numeric.get(i).copied().unwrap_or(false) {
                " class=\"num\""
            } else {
                ""
            };
            let _ = write!(out, "<td{class}>{}</td>", escape(c));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table></div>\n");
}

fn md_table(out: &mut String, t: &Table) {
    out.push('\n');
    let _ = writeln!(
        out,
        "| {} |",
        t.headers
            .iter()
            .map(|h| md_cell(h))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(
        out,
        "|{}|",
        t.numeric
            .iter()
            .map(|n| if *n { "---:" } else { "---" })
            .collect::<Vec<_>>()
            .join("|")
    );
    for r in &t.rows {
        let _ = writeln!(
            out,
            "| {} |",
            r.iter().map(|c| md_cell(c)).collect::<Vec<_>>().join(" | ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Document {
        let mut t = Table::new(["engine", "tokens/s"]).numeric_cols(&[1]);
        t.row(["<script>alert(1)</script>", "12.5"]);
        t.row(["a|b", "3"]);
        Document {
            title: "SoC \"x\" & <y>".into(),
            meta: "generated".into(),
            sections: vec![Section {
                id: "peers".into(),
                title: "Peers".into(),
                blocks: vec![
                    Block::Note("only <software> counters".into()),
                    Block::Table(t),
                    Block::Plot {
                        id: "p1".into(),
                        svg: "<?xml version=\"1.0\"?>\n<svg width=\"10\" height=\"10\"></svg>"
                            .into(),
                        caption: "bars <b>".into(),
                    },
                ],
            }],
        }
    }

    #[test]
    fn html_escapes_every_text_and_keeps_svg_markup() {
        let html = doc().to_html();
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("<title>SoC &quot;x&quot; &amp; &lt;y&gt;</title>"));
        assert!(html.contains("only &lt;software&gt; counters"));
        assert!(html.contains("<svg role=\"img\" aria-label=\"bars &lt;b&gt;\" width=\"10\""));
        assert!(!html.contains("<?xml"));
        assert!(html.contains("<td class=\"num\">12.5</td>"));
        assert!(!html.contains("{{"), "every placeholder is filled");
        assert!(!html.contains("http"), "no external resources: {html}");
    }

    #[test]
    fn markdown_has_the_same_tables_with_cells_escaped() {
        let md = doc().to_markdown();
        assert!(md.contains("| engine | tokens/s |\n|---|---:|\n"), "{md}");
        assert!(md.contains("| a\\|b | 3 |"), "{md}");
        assert!(md.contains("&lt;script>"), "{md}");
        assert!(
            md.contains("> **Note:** only &lt;software> counters"),
            "{md}"
        );
        assert!(md.contains("_Plot in report.html: bars &lt;b>_"));
        assert!(md.starts_with("# SoC \"x\" & &lt;y>\n"));
        assert_eq!(doc().plot_ids(), ["p1"]);
    }
}
