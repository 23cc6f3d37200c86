//! A large value written to a socket from the item's own buffer (plain or TLS), and how much
//! of it has gone out.

/// A large value being written from the item's own buffer, then the bytes after it.
pub struct Unsent {
    value: store::PinnedValue,
    tail: &'static [u8],
    /// Bytes of value + tail already written.
    sent: usize,
}

impl Unsent {
    pub fn new(value: store::PinnedValue, tail: &'static [u8]) -> Unsent {
        Unsent {
            value,
            tail,
            sent: 0,
        }
    }

    /// Bytes of value + tail already written.
    pub fn sent(&self) -> usize {
        self.sent
    }

    /// The next unwritten bytes that lie together: of the value, else of the tail.
    pub fn rest_contiguous(&self) -> &[u8] {
        let (value, tail) = self.rest();
        if value.is_empty() {
            tail
        } else {
            value
        }
    }

    /// Counts `n` more bytes written; true once all of value and tail are.
    pub fn advance(&mut self, n: usize) -> bool {
        self.sent += n;
        self.sent == self.value.bytes().len() + self.tail.len()
    }

    /// What is left of the value and of the tail.
    pub fn rest(&self) -> (&[u8], &[u8]) {
        let value = self.value.bytes();
        if self.sent < value.len() {
            (&value[self.sent..], self.tail)
        } else {
            (&[], &self.tail[self.sent - value.len()..])
        }
    }
}
