//! Expiry times: memcached's client exptime rules and the internal absolute form.

/// Longest relative exptime; larger values are absolute unix times (memcached REALTIME_MAXDELTA).
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;
/// Internal exptime meaning "already expired" (a unix time long past).
pub const EXPIRED: u32 = 1;

/// memcached's realtime() over unix times: 0 never; negative already expired; up to 30 days
/// relative to `now`; larger is absolute, expired if at or before `process_start`.
pub fn exptime_from_client(client: i64, now: u32, process_start: u32) -> u32 {
    if client == 0 {
        return 0;
    }
    if client < 0 {
        return EXPIRED;
    }
    if client > REALTIME_MAXDELTA {
        if client <= process_start as i64 {
            return EXPIRED;
        }
        return client.min(u32::MAX as i64) as u32;
    }
    (now as i64 + client).min(u32::MAX as i64) as u32
}

/// Whether an item with internal exptime `exptime` is gone at `now`.
pub(crate) fn expired(exptime: u32, now: u32) -> bool {
    exptime != 0 && exptime <= now
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u32 = 1_700_000_000;

    #[test]
    fn client_exptimes_follow_memcached_realtime() {
        assert_eq!(exptime_from_client(0, NOW, 0), 0);
        assert_eq!(exptime_from_client(-1, NOW, 0), EXPIRED);
        assert_eq!(exptime_from_client(10, NOW, 0), NOW + 10);
        assert_eq!(
            exptime_from_client(REALTIME_MAXDELTA, NOW, 0),
            NOW + REALTIME_MAXDELTA as u32
        );
        // One past 30 days is an absolute time.
        let abs = REALTIME_MAXDELTA + 1;
        assert_eq!(exptime_from_client(abs, NOW, 0), abs as u32);
        assert_eq!(exptime_from_client(abs, NOW, abs as u32), EXPIRED);
        assert_eq!(exptime_from_client(NOW as i64 + 5, NOW, NOW - 100), NOW + 5);
        assert_eq!(exptime_from_client(i64::MAX, NOW, 0), u32::MAX);
        assert_eq!(exptime_from_client(10, u32::MAX - 1, 0), u32::MAX);
    }

    #[test]
    fn zero_never_expires_and_the_deadline_itself_is_expired() {
        assert!(!expired(0, u32::MAX));
        assert!(!expired(NOW + 1, NOW));
        assert!(expired(NOW, NOW));
        assert!(expired(EXPIRED, NOW));
    }
}
