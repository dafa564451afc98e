//! A line chart as a PNG, drawn pixel by pixel with the `png` crate: one
//! panel per series, each scaled to its own range, a light grid at every
//! tenth of the run. The numbers themselves are in the CSV next to it.

/// Panel size, in pixels.
const WIDTH: usize = 900;
const PANEL: usize = 140;
const COLOURS: [[u8; 3]; 6] =
    [[59, 125, 216], [142, 68, 173], [211, 84, 0], [22, 160, 133], [192, 57, 43], [44, 62, 80]];

/// Writes `series` (name, points of (x, y)) as stacked panels to `path`.
pub fn plot(path: &std::path::Path, series: &[(&str, Vec<(f64, f64)>)]) -> std::io::Result<()> {
    let height = PANEL * series.len().max(1);
    let mut pixels = vec![255u8; WIDTH * height * 3];
    let x_max = series.iter().flat_map(|(_, p)| p.iter().map(|(x, _)| *x)).fold(1e-9, f64::max);
    for (index, (_, points)) in series.iter().enumerate() {
        let top = index * PANEL;
        let (low, high) = points.iter().fold((f64::MAX, f64::MIN), |(lo, hi), (_, y)| (lo.min(*y), hi.max(*y)));
        let (low, high) = if low > high { (0.0, 1.0) } else { (low.min(0.0), high.max(low + 1e-9)) };
        for tenth in 0..=10 {
            let x = (tenth * (WIDTH - 1)) / 10;
            for y in top..top + PANEL {
                set(&mut pixels, x, y, [225, 228, 232]);
            }
        }
        for x in 0..WIDTH {
            set(&mut pixels, x, top + PANEL - 1, [160, 165, 172]);
        }
        let colour = COLOURS[index % COLOURS.len()];
        let to_pixel = |(x, y): (f64, f64)| {
            let px = ((x / x_max) * (WIDTH - 1) as f64).round() as i64;
            let py = top as f64 + 8.0 + (1.0 - (y - low) / (high - low)) * (PANEL - 16) as f64;
            (px, py.round() as i64)
        };
        for pair in points.windows(2) {
            line(&mut pixels, to_pixel(pair[0]), to_pixel(pair[1]), colour);
        }
    }
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut encoder = png::Encoder::new(file, WIDTH as u32, height as u32);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(std::io::Error::other)?;
    writer.write_image_data(&pixels).map_err(std::io::Error::other)?;
    Ok(())
}

fn set(pixels: &mut [u8], x: usize, y: usize, colour: [u8; 3]) {
    let at = (y * WIDTH + x) * 3;
    if at + 3 <= pixels.len() && x < WIDTH {
        pixels[at..at + 3].copy_from_slice(&colour);
    }
}

/// Bresenham's line, two pixels thick.
fn line(pixels: &mut [u8], (x0, y0): (i64, i64), (x1, y1): (i64, i64), colour: [u8; 3]) {
    let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
    let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
    let (mut x, mut y, mut error) = (x0, y0, dx + dy);
    loop {
        for (ox, oy) in [(0, 0), (0, 1)] {
            if x + ox >= 0 && y + oy >= 0 {
                set(pixels, (x + ox) as usize, (y + oy) as usize, colour);
            }
        }
        if x == x1 && y == y1 {
            break;
        }
        let doubled = 2 * error;
        if doubled >= dy {
            error += dy;
            x += sx;
        }
        if doubled <= dx {
            error += dx;
            y += sy;
        }
    }
}
