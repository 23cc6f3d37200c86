//! The view's columns: their cells as text and the order rows sort in. Pure: no I/O.

use std::cmp::Ordering;

use crate::rates::{Health, Row};

/// A column of the view, in display order. The number key of each is its position + 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Column {
    Server,
    Ops,
    Hit,
    Evictions,
    Conns,
    Mem,
    P99,
    Hot,
}

impl Column {
    pub const ALL: [Column; 8] = [
        Column::Server,
        Column::Ops,
        Column::Hit,
        Column::Evictions,
        Column::Conns,
        Column::Mem,
        Column::P99,
        Column::Hot,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Column::Server => "SERVER",
            Column::Ops => "OPS/S",
            Column::Hit => "HIT%",
            Column::Evictions => "EVICT/S",
            Column::Conns => "CONNS",
            Column::Mem => "MEM USED/LIMIT",
            Column::P99 => "P99(us)",
            Column::Hot => "HOT KEYS",
        }
    }

    /// The column a number key (`'1'`..) selects.
    pub fn from_key(key: char) -> Option<Column> {
        let n = key.to_digit(10)? as usize;
        Column::ALL.get(n.checked_sub(1)?).copied()
    }

    /// The next (`step` 1) or previous (`step` -1) column, wrapping around.
    pub fn step(self, step: isize) -> Column {
        let n = Column::ALL.len() as isize;
        let i = Column::ALL.iter().position(|c| *c == self).unwrap_or(0) as isize;
        Column::ALL[(i + step).rem_euclid(n) as usize]
    }

    /// Names sort A→Z; figures sort largest first (what an operator looks for).
    fn descending_by_default(self) -> bool {
        self != Column::Server
    }

    /// The value this column sorts by; `None` (no figure) always sorts last.
    fn key(self, row: &Row) -> Option<f64> {
        match self {
            Column::Server => None,
            Column::Ops => row.ops_per_sec,
            Column::Hit => row.hit_ratio,
            Column::Evictions => row.evictions_per_sec,
            Column::Conns => row.connections.map(|c| c as f64),
            Column::Mem => row.mem_used.map(|b| b as f64),
            Column::P99 => row.p99_us,
            Column::Hot => row.hot_keys.first().map(|k| k.count as f64),
        }
    }

    /// The row's cell in this column.
    pub fn cell(self, row: &Row) -> String {
        if let (Health::Down(why), Column::Hot) = (&row.health, self) {
            return format!("{why} (retrying)");
        }
        let dash = || "-".to_owned();
        match self {
            Column::Server => row.server.clone(),
            Column::Ops => match row.health {
                Health::Down(_) => "down".to_owned(),
                _ => row.ops_per_sec.map_or_else(dash, rate),
            },
            Column::Hit => row
                .hit_ratio
                .map_or_else(dash, |r| format!("{:.1}", r * 100.0)),
            Column::Evictions => row.evictions_per_sec.map_or_else(dash, rate),
            Column::Conns => row.connections.map_or_else(dash, |c| c.to_string()),
            Column::Mem => match (row.mem_used, row.mem_limit) {
                (Some(used), Some(limit)) => format!("{}/{}", bytes(used), bytes(limit)),
                _ => dash(),
            },
            Column::P99 => row.p99_us.map_or_else(dash, |us| format!("{us:.0}")),
            Column::Hot => {
                if row.hot_keys.is_empty() {
                    return dash();
                }
                let shown: Vec<String> = row
                    .hot_keys
                    .iter()
                    .take(3)
                    .map(|k| format!("{}({})", k.key, k.count))
                    .collect();
                shown.join(" ")
            }
        }
    }
}

/// The sort in force: a column and whether it is flipped from the column's usual direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sort {
    pub column: Column,
    pub reversed: bool,
}

impl Sort {
    /// Whether rows go largest first now.
    pub fn descending(self) -> bool {
        self.column.descending_by_default() != self.reversed
    }

    /// Sorts rows in place. Rows with no figure in the column (down, not polled yet, no
    /// such stat) stay at the bottom whatever the direction; ties go by server name.
    pub fn apply(self, rows: &mut [Row]) {
        rows.sort_by(|a, b| {
            let by_value = match (self.column.key(a), self.column.key(b)) {
                _ if self.column == Column::Server => a.server.cmp(&b.server),
                (Some(x), Some(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
                (Some(_), None) => return Ordering::Less,
                (None, Some(_)) => return Ordering::Greater,
                (None, None) => Ordering::Equal,
            };
            let by_value = if self.descending() {
                by_value.reverse()
            } else {
                by_value
            };
            by_value.then_with(|| a.server.cmp(&b.server))
        });
    }
}

/// A per-second rate: whole numbers from 10 up, one decimal below (a trickle stays visible).
fn rate(per_sec: f64) -> String {
    if per_sec >= 10.0 || per_sec == 0.0 {
        format!("{per_sec:.0}")
    } else {
        format!("{per_sec:.1}")
    }
}

/// Bytes in binary units, like memcached's `-m` megabytes.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n}B")
    } else if value >= 100.0 || value.fract() == 0.0 {
        format!("{value:.0}{}", UNITS[unit])
    } else {
        format!("{value:.1}{}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::HotKey;

    fn row(server: &str, ops: Option<f64>, conns: Option<u64>) -> Row {
        let mut r = Row::empty(server, Health::Up);
        r.ops_per_sec = ops;
        r.connections = conns;
        r
    }

    fn names(rows: &[Row]) -> Vec<&str> {
        rows.iter().map(|r| r.server.as_str()).collect()
    }

    #[test]
    fn figures_sort_largest_first_and_missing_ones_last() {
        let mut rows = vec![
            row("a", Some(5.0), Some(9)),
            Row::empty("dead", Health::Down("refused".into())),
            row("b", Some(50.0), Some(1)),
            row("c", None, Some(3)),
        ];
        let mut sort = Sort {
            column: Column::Ops,
            reversed: false,
        };
        sort.apply(&mut rows);
        assert_eq!(names(&rows), ["b", "a", "c", "dead"]);
        sort.reversed = true;
        sort.apply(&mut rows);
        assert_eq!(names(&rows), ["a", "b", "c", "dead"]);
        sort = Sort {
            column: Column::Conns,
            reversed: false,
        };
        sort.apply(&mut rows);
        assert_eq!(names(&rows), ["a", "c", "b", "dead"]);
    }

    #[test]
    fn servers_sort_by_name_ascending() {
        let mut rows = vec![row("b", None, None), row("a", Some(1.0), None)];
        let mut sort = Sort {
            column: Column::Server,
            reversed: false,
        };
        sort.apply(&mut rows);
        assert_eq!(names(&rows), ["a", "b"]);
        sort.reversed = true;
        sort.apply(&mut rows);
        assert_eq!(names(&rows), ["b", "a"]);
    }

    #[test]
    fn keys_select_and_step_columns() {
        assert_eq!(Column::from_key('1'), Some(Column::Server));
        assert_eq!(Column::from_key('5'), Some(Column::Conns));
        assert_eq!(Column::from_key('9'), None);
        assert_eq!(Column::from_key('0'), None);
        assert_eq!(Column::Server.step(-1), Column::Hot);
        assert_eq!(Column::Hot.step(1), Column::Server);
        assert_eq!(Column::Ops.step(1), Column::Hit);
    }

    #[test]
    fn cells_format_figures_and_dashes() {
        let mut r = row("s", Some(1234.4), Some(7));
        r.hit_ratio = Some(0.9876);
        r.evictions_per_sec = Some(0.5);
        r.mem_used = Some(3 * 1024 * 1024 + 512 * 1024);
        r.mem_limit = Some(64 * 1024 * 1024);
        r.hot_keys = vec![
            HotKey {
                key: "k1".into(),
                count: 9,
            },
            HotKey {
                key: "k2".into(),
                count: 4,
            },
        ];
        let cells: Vec<String> = Column::ALL.iter().map(|c| c.cell(&r)).collect();
        assert_eq!(
            cells,
            [
                "s",
                "1234",
                "98.8",
                "0.5",
                "7",
                "3.5M/64M",
                "-",
                "k1(9) k2(4)"
            ]
        );
        let down = Row::empty("d", Health::Down("connection refused".into()));
        assert_eq!(Column::Ops.cell(&down), "down");
        assert_eq!(Column::P99.cell(&down), "-");
        assert_eq!(Column::Hot.cell(&down), "connection refused (retrying)");
    }

    #[test]
    fn byte_units() {
        assert_eq!(bytes(0), "0B");
        assert_eq!(bytes(1023), "1023B");
        assert_eq!(bytes(1536), "1.5K");
        assert_eq!(bytes(1 << 30), "1G");
        assert_eq!(bytes(200 * 1024 * 1024 + 1), "200M");
    }
}
