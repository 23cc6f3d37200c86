//! The terminal: draws the rows as a table every interval and reads the sort keys.

use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row as TableRow, Table};
use ratatui::{DefaultTerminal, Frame};

use crate::poll::Rows;
use crate::rates::{Health, Row};
use crate::table::{Column, Sort};

/// What a key press asks for.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    Quit,
    Sort(Sort),
    Nothing,
}

/// How a key changes the sort: a number picks a column (the same one again flips it),
/// `<`/`>` or the arrows move to the previous/next column, `r` flips the direction.
fn on_key(code: KeyCode, modifiers: KeyModifiers, sort: Sort) -> Action {
    let pick = |column: Column| Sort {
        column,
        reversed: false,
    };
    match code {
        KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
        KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => Action::Quit,
        KeyCode::Char('r') => Action::Sort(Sort {
            reversed: !sort.reversed,
            ..sort
        }),
        KeyCode::Char('<') | KeyCode::Left => Action::Sort(pick(sort.column.step(-1))),
        KeyCode::Char('>') | KeyCode::Right => Action::Sort(pick(sort.column.step(1))),
        KeyCode::Char(c) => match Column::from_key(c) {
            Some(column) if column == sort.column => Action::Sort(Sort {
                reversed: !sort.reversed,
                ..sort
            }),
            Some(column) => Action::Sort(pick(column)),
            None => Action::Nothing,
        },
        _ => Action::Nothing,
    }
}

/// Runs the view until `q`. Redraws every `interval` and after every key.
pub fn run(
    terminal: &mut DefaultTerminal,
    rows: &Rows,
    interval: Duration,
    mut sort: Sort,
) -> std::io::Result<()> {
    let mut next_tick = Instant::now();
    loop {
        let now = Instant::now();
        if now >= next_tick {
            // After a stall (a suspended terminal, say) start afresh rather than catch up.
            next_tick = (next_tick + interval).max(now + interval / 2);
        }
        let mut shown = rows.lock().map(|r| r.clone()).unwrap_or_default();
        sort.apply(&mut shown);
        terminal.draw(|frame| draw(frame, &shown, sort, interval))?;
        // Until the next tick, or sooner for a key that changes the view or a resize.
        loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            if !event::poll(wait)? {
                break;
            }
            match event::read()? {
                Event::Key(key) if key.kind == KeyEventKind::Press => {
                    match on_key(key.code, key.modifiers, sort) {
                        Action::Quit => return Ok(()),
                        Action::Sort(s) => {
                            sort = s;
                            break;
                        }
                        Action::Nothing => {}
                    }
                }
                Event::Resize(..) => break,
                _ => {}
            }
        }
    }
}

fn draw(frame: &mut Frame, rows: &[Row], sort: Sort, interval: Duration) {
    let [status, table, help] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Fill(1),
        Constraint::Length(1),
    ])
    .areas(frame.area());

    let down = rows
        .iter()
        .filter(|r| matches!(r.health, Health::Down(_)))
        .count();
    let direction = if sort.descending() {
        "largest first"
    } else {
        "smallest first"
    };
    let direction = if sort.column == Column::Server {
        if sort.descending() {
            "Z-A"
        } else {
            "A-Z"
        }
    } else {
        direction
    };
    frame.render_widget(
        Paragraph::new(format!(
            "memfleet top - {} servers, {down} down - every {:.1}s - sort: {} {direction}",
            rows.len(),
            interval.as_secs_f64(),
            sort.column.title(),
        )),
        status,
    );

    let titles: Vec<String> = Column::ALL
        .iter()
        .map(|&c| match c == sort.column {
            true if sort.descending() => format!("{} v", c.title()),
            true => format!("{} ^", c.title()),
            false => c.title().to_owned(),
        })
        .collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| Column::ALL.iter().map(|c| c.cell(r)).collect())
        .collect();
    // Each column as wide as its widest cell; the hot keys take what is left.
    let widths: Vec<Constraint> = (0..Column::ALL.len())
        .map(|i| {
            let widest = cells
                .iter()
                .map(|row| row[i].chars().count())
                .max()
                .unwrap_or(0);
            let width = widest.max(titles[i].chars().count()) as u16;
            if i + 1 == Column::ALL.len() {
                Constraint::Min(width)
            } else {
                Constraint::Length(width)
            }
        })
        .collect();
    let header = TableRow::new(titles.into_iter().map(Cell::from))
        .style(Style::default().add_modifier(Modifier::REVERSED));
    let body = rows.iter().zip(cells).map(|(row, cells)| {
        let style = match row.health {
            Health::Down(_) => Style::default().fg(Color::Red),
            Health::Waiting => Style::default().add_modifier(Modifier::DIM),
            Health::Up => Style::default(),
        };
        TableRow::new(cells.into_iter().map(Cell::from)).style(style)
    });
    frame.render_widget(
        Table::new(body, widths).header(header).column_spacing(2),
        table,
    );

    frame.render_widget(
        Line::from("keys: 1-8 sort by column (again: reverse)  </>: previous/next column  r: reverse  q: quit"),
        help,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPS: Sort = Sort {
        column: Column::Ops,
        reversed: false,
    };

    #[test]
    fn keys_change_the_sort() {
        let none = KeyModifiers::NONE;
        let conns = Sort {
            column: Column::Conns,
            reversed: false,
        };
        assert_eq!(on_key(KeyCode::Char('5'), none, OPS), Action::Sort(conns));
        assert_eq!(
            on_key(KeyCode::Char('2'), none, OPS),
            Action::Sort(Sort {
                reversed: true,
                ..OPS
            })
        );
        assert_eq!(
            on_key(KeyCode::Char('r'), none, OPS),
            Action::Sort(Sort {
                reversed: true,
                ..OPS
            })
        );
        assert_eq!(
            on_key(KeyCode::Right, none, OPS),
            Action::Sort(Sort {
                column: Column::Hit,
                reversed: false
            })
        );
        assert_eq!(
            on_key(KeyCode::Char('<'), none, OPS),
            Action::Sort(Sort {
                column: Column::Server,
                reversed: false
            })
        );
        assert_eq!(on_key(KeyCode::Char('x'), none, OPS), Action::Nothing);
        assert_eq!(on_key(KeyCode::Char('q'), none, OPS), Action::Quit);
        assert_eq!(
            on_key(KeyCode::Char('c'), KeyModifiers::CONTROL, OPS),
            Action::Quit
        );
    }
}
