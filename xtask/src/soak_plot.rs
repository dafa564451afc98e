//! The soak's plot (`cargo xtask soak`, `host/tests/soak.rs`): its samples
//! (`soak.csv`) and churn events (`events.csv`) drawn with plotters into
//! one PNG, with a title, time in minutes, axes with their units, a legend
//! per panel and the events marked.
//!
//! - memory (MiB, left axis) and open file descriptors (right axis), summed
//!   over the running nodes;
//! - shards homed (left) and regions registered (right);
//! - strategy fallbacks, deadline faults and unanswered home requests
//!   (cumulative counts);
//! - the churn events, one row each, one tick per event: regions joining,
//!   leaving, crashing, drained or undrained, strategy swaps and, on etcd,
//!   leader kills and node restarts.
//!
//! Leader kills are also red vertical lines across the three data panels.
//! Text is drawn by plotters' pure-Rust `ab_glyph` renderer with DejaVu Sans
//! embedded (the `dejavu` crate): no system font or font library.
//! [`draw`] takes parsed rows, so a run's CSV can be drawn again
//! (`cargo xtask soak --plot`) and a test can draw a synthetic series.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{Context, anyhow, bail};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{FontStyle, register_font};

/// The image's size, in pixels.
pub const WIDTH: u32 = 1280;
/// The image's height, in pixels.
pub const HEIGHT: u32 = 1080;

/// One row of `soak.csv` (columns missing from an older CSV read as 0).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// Since the soak started.
    pub seconds: f64,
    /// Resident memory summed over the running nodes, KiB.
    pub rss_kib: f64,
    /// Open file descriptors summed over the running nodes.
    pub fds: f64,
    /// Regions registered.
    pub regions: f64,
    /// Shards homed.
    pub homes: f64,
    /// The leader's strategy fallbacks so far.
    pub fallbacks: f64,
    /// Those of them that were deadline faults.
    pub deadline_faults: f64,
    /// Home requests the probe region asked so far.
    pub asked: f64,
    /// Home requests unanswered so far.
    pub unanswered: f64,
    /// Churn actions so far.
    pub actions: f64,
    /// Leader kills so far.
    pub kills: f64,
}

/// One row of `events.csv`: `seconds,event,detail`.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Since the soak started.
    pub seconds: f64,
    /// `start`, `join`, `leave`, `crash`, `drain`, `undrain`, `activate`,
    /// `rollback`, `kill`, `restart` (placement calls are not recorded).
    pub kind: String,
    /// The region, node or strategy; for `start`, what the soak runs on.
    pub detail: String,
}

/// Parses `soak.csv` by its header's column names.
pub fn read_samples(text: &str) -> anyhow::Result<Vec<Sample>> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().context("the CSV is empty")?.split(',').map(str::trim).collect();
    let column = |name: &str| header.iter().position(|h| *h == name);
    let seconds = column("seconds").context("the CSV has no `seconds` column")?;
    let named = |name| column(name);
    let columns = [
        named("rss_kib"),
        named("fds"),
        named("regions"),
        named("homes"),
        named("fallbacks"),
        named("deadline_faults"),
        named("asked"),
        named("unanswered"),
        named("actions"),
        named("kills"),
    ];
    let mut samples = Vec::new();
    for (number, line) in lines.enumerate() {
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let value = |index: Option<usize>| -> anyhow::Result<f64> {
            match index.and_then(|i| cells.get(i)) {
                None => Ok(0.0),
                // `+ 0.0`: a sum of nothing written as -0 reads as 0.
                Some(cell) => cell
                    .parse::<f64>()
                    .map(|v| v + 0.0)
                    .with_context(|| format!("CSV row {}: {cell:?} is not a number", number + 2)),
            }
        };
        let [rss_kib, fds, regions, homes, fallbacks, deadline_faults, asked, unanswered, actions, kills] =
            columns.map(&value);
        samples.push(Sample {
            seconds: value(Some(seconds))?,
            rss_kib: rss_kib?,
            fds: fds?,
            regions: regions?,
            homes: homes?,
            fallbacks: fallbacks?,
            deadline_faults: deadline_faults?,
            asked: asked?,
            unanswered: unanswered?,
            actions: actions?,
            kills: kills?,
        });
    }
    Ok(samples)
}

/// Parses `events.csv` (the detail is the rest of the line, commas and all).
pub fn read_events(text: &str) -> anyhow::Result<Vec<Event>> {
    let mut events = Vec::new();
    for (number, line) in text.lines().enumerate().skip(1).filter(|(_, l)| !l.trim().is_empty()) {
        let mut cells = line.splitn(3, ',');
        let seconds = cells.next().unwrap_or("").trim();
        let seconds =
            seconds.parse().with_context(|| format!("events row {}: {seconds:?} is not a number", number + 1))?;
        let kind = cells.next().with_context(|| format!("events row {}: no event", number + 1))?.trim().to_owned();
        events.push(Event { seconds, kind, detail: cells.next().unwrap_or("").trim().to_owned() });
    }
    Ok(events)
}

/// The plot's title: what the soak ran on (its `start` event, else a guess
/// from the kills) and for how long.
pub fn title(samples: &[Sample], events: &[Event]) -> String {
    let store = match events.iter().find(|e| e.kind == "start") {
        Some(start) => start.detail.clone(),
        None if samples.iter().any(|s| s.kills > 0.0) => "three nodes on etcd, the leader killed".to_owned(),
        None => "one node".to_owned(),
    };
    let minutes = samples.last().map_or(0.0, |s| s.seconds) / 60.0;
    format!("shardalloc soak: {store}, {} min", minutes_text(minutes))
}

/// A line of totals under the title, from the last sample.
fn subtitle(samples: &[Sample]) -> String {
    let Some(last) = samples.last() else { return "no samples".to_owned() };
    let mut parts = vec![
        format!("{} samples, one every 5 s", samples.len()),
        format!("{:.0} churn actions", last.actions),
        format!("{:.0} home requests, {:.0} unanswered", last.asked, last.unanswered),
    ];
    if last.kills > 0.0 {
        parts.push(format!("{:.0} leader kills", last.kills));
    }
    parts.join("; ")
}

fn minutes_text(minutes: f64) -> String {
    if minutes >= 10.0 || (minutes - minutes.round()).abs() < 0.05 {
        format!("{minutes:.0}")
    } else {
        format!("{minutes:.1}")
    }
}

/// The embedded DejaVu Sans, registered once as plotters' `sans-serif`.
fn fonts() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let registered = REGISTERED.get_or_init(|| {
        register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular()).is_ok()
            && register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold()).is_ok()
    });
    if !registered {
        bail!("the embedded DejaVu Sans font could not be read");
    }
    Ok(())
}

/// Reads `csv` (and `events`, when given and present) and draws them to `out`.
pub fn redraw(csv: &Path, events: Option<&Path>, out: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(csv).with_context(|| format!("read {}", csv.display()))?;
    let samples = read_samples(&text).with_context(|| format!("parse {}", csv.display()))?;
    let events = match events {
        Some(path) if path.exists() => {
            let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
            read_events(&text).with_context(|| format!("parse {}", path.display()))?
        }
        _ => Vec::new(),
    };
    draw(out, &title(&samples, &events), &samples, &events)
}

/// Draws `samples` and `events` under `title` into the PNG `path`
/// ([`WIDTH`] × [`HEIGHT`], RGB).
pub fn draw(path: &Path, title: &str, samples: &[Sample], events: &[Event]) -> anyhow::Result<()> {
    let pixels = render(title, samples, events)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("create {}", parent.display()))?;
    }
    let file = std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), WIDTH, HEIGHT);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&pixels)?;
    writer.finish()?;
    Ok(())
}

/// One line of a panel: its legend text, colour and values.
struct Line {
    label: &'static str,
    colour: RGBColor,
    pick: fn(&Sample) -> f64,
}

const BLUE: RGBColor = RGBColor(31, 119, 180);
const ORANGE: RGBColor = RGBColor(230, 120, 20);
const GREEN: RGBColor = RGBColor(44, 160, 44);
const PURPLE: RGBColor = RGBColor(148, 103, 189);
const BROWN: RGBColor = RGBColor(140, 86, 75);
const GREY: RGBColor = RGBColor(90, 90, 90);
const KILL: RGBColor = RGBColor(214, 39, 40);

/// The event rows, top to bottom: (kinds, label, colour). Kill and restart
/// rows are drawn only when the run had such events.
const ROWS: [(&[&str], &str, RGBColor); 7] = [
    (&["kill"], "leader killed", KILL),
    (&["restart"], "node restarted", GREEN),
    (&["join"], "region joined", BLUE),
    (&["leave"], "region left", PURPLE),
    (&["crash"], "region crashed", ORANGE),
    (&["drain", "undrain"], "region drained or undrained", BROWN),
    (&["activate", "rollback"], "strategy swapped or rolled back", GREY),
];

/// The PNG's pixels (RGB) before encoding.
fn render(title: &str, samples: &[Sample], events: &[Event]) -> anyhow::Result<Vec<u8>> {
    fonts()?;
    let mut pixels = vec![255u8; (WIDTH * HEIGHT * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(plotting)?;
        let centre = Pos::new(HPos::Center, VPos::Top);
        let title_style = ("sans-serif", 26, FontStyle::Bold).into_text_style(&root).pos(centre);
        root.draw_text(title, &title_style, (WIDTH as i32 / 2, 12)).map_err(plotting)?;
        let sub_style = ("sans-serif", 16).into_text_style(&root).color(&GREY).pos(centre);
        root.draw_text(&subtitle(samples), &sub_style, (WIDTH as i32 / 2, 46)).map_err(plotting)?;

        let end = events.iter().map(|e| e.seconds).chain(samples.last().map(|s| s.seconds)).fold(0.0, f64::max);
        let minutes = (end / 60.0).max(1.0 / 12.0);
        let kills: Vec<f64> = events.iter().filter(|e| e.kind == "kill").map(|e| e.seconds / 60.0).collect();
        let body = root.margin(76, 10, 0, 0);
        let no_columns: [i32; 0] = [];
        let areas = body.split_by_breakpoints(no_columns, [270, 510, 720]);
        let memory = [
            Line { label: "resident memory (MiB, left axis)", colour: BLUE, pick: |s| s.rss_kib / 1024.0 },
            Line { label: "open file descriptors (right axis)", colour: ORANGE, pick: |s| s.fds },
        ];
        panel(
            &root,
            &areas[0],
            "Memory and descriptors",
            ("resident memory (MiB)", "open descriptors"),
            &memory,
            samples,
            minutes,
            &kills,
        )?;
        let shards = [
            Line { label: "shards homed (left axis)", colour: GREEN, pick: |s| s.homes },
            Line { label: "regions registered (right axis)", colour: PURPLE, pick: |s| s.regions },
        ];
        panel(
            &root,
            &areas[1],
            "Shards and regions",
            ("shards homed", "regions registered"),
            &shards,
            samples,
            minutes,
            &kills,
        )?;
        let faults = [
            Line { label: "strategy fallbacks", colour: BROWN, pick: |s| s.fallbacks },
            Line { label: "deadline faults", colour: ORANGE, pick: |s| s.deadline_faults },
            Line { label: "unanswered home requests", colour: KILL, pick: |s| s.unanswered },
        ];
        panel(&root, &areas[2], "Faults", ("count (cumulative)", ""), &faults, samples, minutes, &kills)?;
        event_panel(&root, &areas[3], events, minutes)?;
        root.present().map_err(plotting)?;
    }
    Ok(pixels)
}

fn plotting<E: std::error::Error>(error: E) -> anyhow::Error {
    anyhow!("drawing the plot: {error}")
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// The time axis's labels: whole minutes once the run is long enough.
fn time_label(minutes: f64) -> impl Fn(&f64) -> String {
    move |x: &f64| if minutes >= 5.0 { format!("{x:.0}") } else { format!("{x:.1}") }
}

/// A legend row at (x, y) on the root: a short line of each colour, then its label.
fn legend(root: &Area, (mut x, y): (i32, i32), entries: &[(String, RGBColor)]) -> anyhow::Result<()> {
    let style = ("sans-serif", 15).into_text_style(root).pos(Pos::new(HPos::Left, VPos::Center));
    for (label, colour) in entries {
        root.draw(&PathElement::new(vec![(x, y), (x + 24, y)], colour.stroke_width(3))).map_err(plotting)?;
        root.draw_text(label, &style, (x + 30, y)).map_err(plotting)?;
        let (width, _) = root.estimate_text_size(label, &style).map_err(plotting)?;
        x += 30 + width as i32 + 26;
    }
    Ok(())
}

/// A panel of one or two lines on the left axis and, when `units.1` is
/// set, the second line on its own right axis; leader kills as red lines.
#[allow(clippy::too_many_arguments, reason = "one panel's every dimension, named at the call")]
fn panel(
    root: &Area,
    area: &Area,
    caption: &str,
    units: (&str, &str),
    lines: &[Line],
    samples: &[Sample],
    minutes: f64,
    kills: &[f64],
) -> anyhow::Result<()> {
    let dual = !units.1.is_empty();
    let (left, right) = if dual { (&lines[..1], &lines[1..]) } else { (lines, &lines[..0]) };
    let top = |chosen: &[Line]| {
        let high = samples.iter().flat_map(|s| chosen.iter().map(|l| (l.pick)(s))).fold(0.0, f64::max);
        if high > 0.0 { high * 1.15 } else { 1.0 }
    };
    let mut chart = ChartBuilder::on(area)
        .margin_top(34)
        .margin_left(10)
        .margin_right(10)
        .margin_bottom(6)
        .x_label_area_size(36)
        .y_label_area_size(84)
        .right_y_label_area_size(84)
        .build_cartesian_2d(0.0..minutes, 0.0..top(left))
        .map_err(plotting)?
        .set_secondary_coord(0.0..minutes, 0.0..top(right));
    let label_font = ("sans-serif", 14);
    let desc_font = ("sans-serif", 15);
    let formatter = time_label(minutes);
    chart
        .configure_mesh()
        .x_labels(13)
        .y_labels(6)
        .x_label_formatter(&formatter)
        .y_label_formatter(&|y| compact(*y))
        .x_desc("time since the soak started (min)")
        .y_desc(units.0)
        .label_style(label_font)
        .axis_desc_style(desc_font)
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.1))
        .draw()
        .map_err(plotting)?;
    if dual {
        chart
            .configure_secondary_axes()
            .y_labels(6)
            .y_label_formatter(&|y| compact(*y))
            .y_desc(units.1)
            .label_style(label_font)
            .axis_desc_style(desc_font)
            .draw()
            .map_err(plotting)?;
    }
    let y_top = chart.y_range().end;
    for &at in kills {
        chart.draw_series(LineSeries::new([(at, 0.0), (at, y_top)], KILL.mix(0.35))).map_err(plotting)?;
    }
    for line in left {
        let points = samples.iter().map(|s| (s.seconds / 60.0, (line.pick)(s)));
        chart.draw_series(LineSeries::new(points, line.colour.stroke_width(2))).map_err(plotting)?;
    }
    for line in right {
        let points = samples.iter().map(|s| (s.seconds / 60.0, (line.pick)(s)));
        chart.draw_secondary_series(LineSeries::new(points, line.colour.stroke_width(2))).map_err(plotting)?;
    }
    let (x0, y0) = chart.backend_coord(&(0.0, y_top));
    let caption_style =
        ("sans-serif", 17, FontStyle::Bold).into_text_style(root).pos(Pos::new(HPos::Left, VPos::Center));
    root.draw_text(caption, &caption_style, (x0, y0 - 18)).map_err(plotting)?;
    let (caption_width, _) = root.estimate_text_size(caption, &caption_style).map_err(plotting)?;
    // Counts that may lie on top of each other (all zero) say their last value.
    let last = |line: &Line| samples.last().map_or(0.0, line.pick);
    let mut entries: Vec<(String, RGBColor)> = lines
        .iter()
        .map(|l| (if dual { l.label.to_owned() } else { format!("{}: {}", l.label, compact(last(l))) }, l.colour))
        .collect();
    if !kills.is_empty() {
        entries.push((format!("leader killed ({})", kills.len()), RGBColor(235, 150, 150)));
    }
    legend(root, (x0 + caption_width as i32 + 30, y0 - 18), &entries)
}

/// The event rows: one tick per event at its time.
fn event_panel(root: &Area, area: &Area, events: &[Event], minutes: f64) -> anyhow::Result<()> {
    let had = |kinds: &[&str]| events.iter().any(|e| kinds.contains(&e.kind.as_str()));
    let rows: Vec<_> =
        ROWS.iter().filter(|(kinds, ..)| !matches!(kinds[0], "kill" | "restart") || had(kinds)).collect();
    let count = rows.len() as f64;
    let mut chart = ChartBuilder::on(area)
        .margin_top(34)
        .margin_left(10)
        .margin_right(94)
        .margin_bottom(6)
        .x_label_area_size(44)
        .y_label_area_size(84)
        .build_cartesian_2d(0.0..minutes, -0.5..count - 0.5)
        .map_err(plotting)?;
    let formatter = time_label(minutes);
    chart
        .configure_mesh()
        .x_labels(13)
        .disable_y_mesh()
        .y_labels(0)
        .x_label_formatter(&formatter)
        .x_desc("time since the soak started (min)")
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.1))
        .draw()
        .map_err(plotting)?;
    // Each row's band: its name (and count) in the upper part, its ticks below.
    let row_style = ("sans-serif", 14).into_text_style(root).pos(Pos::new(HPos::Left, VPos::Center));
    for (index, (kinds, label, colour)) in rows.iter().enumerate() {
        let y = count - 1.0 - index as f64;
        let ticks = events.iter().filter(|e| kinds.contains(&e.kind.as_str())).map(|e| {
            let x = e.seconds / 60.0;
            PathElement::new(vec![(x, y - 0.45), (x, y + 0.02)], colour.stroke_width(1))
        });
        chart.draw_series(ticks).map_err(plotting)?;
        let (x, label_y) = chart.backend_coord(&(0.0, y + 0.24));
        let number = events.iter().filter(|e| kinds.contains(&e.kind.as_str())).count();
        let label_colour = row_style.color(colour);
        root.draw_text(&format!("{label} ({number})"), &label_colour, (x + 4, label_y)).map_err(plotting)?;
    }
    let (x0, y0) = chart.backend_coord(&(0.0, count - 0.5));
    let caption_style =
        ("sans-serif", 17, FontStyle::Bold).into_text_style(root).pos(Pos::new(HPos::Left, VPos::Center));
    root.draw_text("Churn events (one tick each; how many in brackets)", &caption_style, (x0, y0 - 18))
        .map_err(plotting)?;
    Ok(())
}

/// An axis value, short: 1500 → 1.5k.
fn compact(value: f64) -> String {
    if value.abs() >= 10_000.0 {
        format!("{:.0}k", value / 1000.0)
    } else if value.abs() >= 1000.0 {
        format!("{:.1}k", value / 1000.0)
    } else if value.fract().abs() < 1e-9 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Twelve minutes of a made-up run: memory that saws, homes that climb,
    /// a kill every two minutes and churn every 10 s.
    fn synthetic() -> (Vec<Sample>, Vec<Event>) {
        let samples = (0..=144)
            .map(|i| {
                let seconds = i as f64 * 5.0;
                Sample {
                    seconds,
                    rss_kib: 80_000.0 + 20_000.0 * ((seconds / 120.0).fract()),
                    fds: 30.0 + (i % 7) as f64,
                    regions: 4.0 + (i % 5) as f64,
                    homes: (seconds * 2.0).min(400.0),
                    fallbacks: (i / 40) as f64,
                    actions: seconds,
                    asked: seconds * 3.0,
                    kills: (seconds / 120.0).floor(),
                    ..Sample::default()
                }
            })
            .collect();
        let mut events = vec![Event { seconds: 0.0, kind: "start".into(), detail: "three nodes on etcd, test".into() }];
        for i in 1..72 {
            let kind = ["join", "leave", "crash", "drain", "activate"][i % 5];
            events.push(Event { seconds: i as f64 * 10.0, kind: kind.into(), detail: format!("r{}", i % 8) });
        }
        for k in 1..6 {
            events.push(Event { seconds: k as f64 * 120.0, kind: "kill".into(), detail: "n0".into() });
            events.push(Event { seconds: k as f64 * 120.0 + 5.0, kind: "restart".into(), detail: "n0".into() });
        }
        (samples, events)
    }

    #[test]
    fn a_synthetic_series_draws_a_png_of_the_expected_size_that_is_not_blank() {
        let (samples, events) = synthetic();
        let path = std::env::temp_dir().join(format!("shardalloc-soak-plot-{}.png", std::process::id()));
        draw(&path, &title(&samples, &events), &samples, &events).unwrap();
        let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&path).unwrap()));
        let mut reader = decoder.read_info().unwrap();
        let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
        let frame = reader.next_frame(&mut pixels).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!((frame.width, frame.height), (WIDTH, HEIGHT));
        assert_eq!(frame.color_type, png::ColorType::Rgb);
        let pixels = &pixels[..frame.buffer_size()];
        let rgb: Vec<[u8; 3]> = pixels.chunks(3).map(|p| [p[0], p[1], p[2]]).collect();
        let painted = rgb.iter().filter(|p| **p != [255, 255, 255]).count();
        assert!(painted > rgb.len() / 50, "only {painted} of {} pixels painted", rgb.len());
        // The title is text: dark pixels in its band, in the middle.
        let title_band = rgb[(14 * WIDTH as usize)..(38 * WIDTH as usize)].iter();
        assert!(title_band.filter(|p| p.iter().all(|c| *c < 80)).count() > 200, "no title drawn");
        // Each line's colour is there.
        for colour in [BLUE, ORANGE, GREEN, PURPLE] {
            let RGBColor(r, g, b) = colour;
            assert!(rgb.contains(&[r, g, b]), "no pixel of {colour:?}");
        }
    }

    #[test]
    fn the_csv_is_read_by_its_header_and_older_columns_default_to_zero() {
        let text = "seconds,rss_kib,fds,regions,homes,fallbacks,deadline_faults,asked,answered,unanswered,actions,leader,kills\n\
                    5,81920,24,5,120,0,0,15,15,0,5,n1,0\n10,82000,25,6,400,1,1,30,30,0,10,none,1\n";
        let samples = read_samples(text).unwrap();
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[1].homes, 400.0);
        assert_eq!(samples[1].kills, 1.0);
        assert_eq!(samples[0].rss_kib, 81920.0);
        let older = read_samples("seconds,rss_kib\n5,100\n").unwrap();
        assert_eq!(older[0].fds, 0.0);
        let negative_zero = read_samples("seconds,fallbacks\n5,-0\n").unwrap();
        assert!(negative_zero[0].fallbacks.is_sign_positive(), "-0 reads as 0");
        assert_eq!(compact(negative_zero[0].fallbacks), "0");
        assert!(read_samples("rss_kib\n5\n").is_err());
        assert!(read_samples("seconds,fds\n5,many\n").is_err());
    }

    #[test]
    fn events_keep_commas_in_their_detail_and_the_title_says_the_store() {
        let events = read_events(
            "seconds,event,detail\n0.0,start,three nodes on etcd, the leader killed every 60 s\n61.2,kill,n1\n",
        )
        .unwrap();
        assert_eq!(events[0].detail, "three nodes on etcd, the leader killed every 60 s");
        assert_eq!(events[1], Event { seconds: 61.2, kind: "kill".into(), detail: "n1".into() });
        let samples = vec![Sample { seconds: 3600.0, ..Sample::default() }];
        assert_eq!(
            title(&samples, &events),
            "shardalloc soak: three nodes on etcd, the leader killed every 60 s, 60 min"
        );
        assert_eq!(title(&samples, &[]), "shardalloc soak: one node, 60 min");
    }
}
