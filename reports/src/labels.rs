//! Where point labels go on a plot so that no two overlap: a greedy
//! placement in pixel space. Each label tries the four corners next to its
//! anchor, then the same sides stepped further up and down one label height
//! at a time, and takes the first spot that stays inside the plot and
//! touches neither a placed label nor an obstacle (the legend). Labels are
//! short (point numbers), so a few steps always find room; a label pushed
//! off its corner gets a leader line to its point.

/// An axis-aligned pixel box: left, top, width, height.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rect {
    pub x: i32,
    pub y: i32,
    pub w: i32,
    pub h: i32,
}

impl Rect {
    pub fn new(x: i32, y: i32, w: i32, h: i32) -> Rect {
        Rect { x, y, w, h }
    }

    /// Whether the two boxes share any area once grown by `pad` pixels.
    pub fn overlaps(&self, o: &Rect, pad: i32) -> bool {
        self.x - pad < o.x + o.w
            && o.x - pad < self.x + self.w
            && self.y - pad < o.y + o.h
            && o.y - pad < self.y + self.h
    }

    fn inside(&self, b: &Rect) -> bool {
        self.x >= b.x
            && self.y >= b.y
            && self.x + self.w <= b.x + b.w
            && self.y + self.h <= b.y + b.h
    }
}

/// A placed label: its box, and whether it left its anchor's corner (then
/// a leader line shows which point it names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    pub rect: Rect,
    pub displaced: bool,
}

/// Gap between a point and its label, and between two labels.
const GAP: i32 = 3;
/// How many label heights a label may move away from its point.
const MAX_STEPS: i32 = 60;

/// Places labels of `sizes` (w, h) at `anchors` (pixel points), in order,
/// inside `bounds` and clear of `obstacles`. A label that finds no free
/// spot (a plot too small for its labels) keeps its first corner.
pub fn place(
    anchors: &[(i32, i32)],
    sizes: &[(i32, i32)],
    obstacles: &[Rect],
    bounds: Rect,
) -> Vec<Placed> {
    let mut placed: Vec<Placed> = Vec::with_capacity(anchors.len());
    for (&(ax, ay), &(w, h)) in anchors.iter().zip(sizes) {
        let right = ax + GAP;
        let left = ax - GAP - w;
        let spots = (0..=MAX_STEPS).flat_map(|k| {
            let up = ay - GAP - h - k * (h + GAP);
            let down = ay + GAP + k * (h + GAP);
            [(right, up), (right, down), (left, up), (left, down)].map(|p| (p, k > 0))
        });
        let free = |r: &Rect| {
            r.inside(&bounds)
                && !obstacles.iter().any(|o| r.overlaps(o, GAP))
                && !placed.iter().any(|p| r.overlaps(&p.rect, GAP))
        };
        let first = Placed {
            rect: Rect::new(right, ay - GAP - h, w, h),
            displaced: false,
        };
        let found = spots
            .map(|((x, y), displaced)| Placed {
                rect: Rect::new(x, y, w, h),
                displaced,
            })
            .find(|p| free(&p.rect))
            .unwrap_or(first);
        placed.push(found);
    }
    placed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crowded_labels_never_overlap_and_stay_inside() {
        let bounds = Rect::new(0, 0, 400, 300);
        // Twelve points within a few pixels of each other.
        let anchors: Vec<(i32, i32)> = (0..12).map(|i| (200 + i % 3, 150 + i % 2)).collect();
        let sizes = vec![(16, 16); 12];
        let legend = [Rect::new(0, 0, 120, 60)];
        let placed = place(&anchors, &sizes, &legend, bounds);
        for (i, a) in placed.iter().enumerate() {
            assert!(a.rect.inside(&bounds), "{a:?}");
            assert!(!a.rect.overlaps(&legend[0], 0));
            for b in &placed[i + 1..] {
                assert!(!a.rect.overlaps(&b.rect, 0), "{a:?} and {b:?}");
            }
        }
        // The first takes its natural corner; crowded ones move and say so.
        assert_eq!(
            placed[0],
            Placed {
                rect: Rect::new(203, 131, 16, 16),
                displaced: false
            }
        );
        assert!(placed.iter().any(|p| p.displaced));
    }

    #[test]
    fn a_label_avoids_the_plot_edge_by_taking_another_corner() {
        let bounds = Rect::new(0, 0, 100, 100);
        let placed = place(&[(95, 5)], &[(20, 10)], &[], bounds);
        // Above is off the top and right is off the side: lower left.
        assert_eq!(placed[0].rect, Rect::new(72, 8, 20, 10));
        assert!(!placed[0].displaced);
    }
}
