//! The host's own IP addresses, which JSONM's `@isLocalIp` compares with.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Every address of every interface (up or not, as mcrouter's enumeration); empty if the
/// kernel would not list them.
pub fn host_ips() -> Vec<IpAddr> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Vec::new();
    }
    let mut ips = Vec::new();
    let mut at = head;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*at };
        if let Some(ip) = unsafe { ip_of(ifa.ifa_addr) } {
            ips.push(ip);
        }
        at = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    ips
}

/// The IP address in `addr`, if it holds an IPv4 or IPv6 one.
///
/// # Safety
/// `addr` is null or points to a sockaddr whose family says its real size.
unsafe fn ip_of(addr: *const libc::sockaddr) -> Option<IpAddr> {
    if addr.is_null() {
        return None;
    }
    match i32::from((*addr).sa_family) {
        libc::AF_INET => {
            let v4 = &*addr.cast::<libc::sockaddr_in>();
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))))
        }
        libc::AF_INET6 => {
            let v6 = &*addr.cast::<libc::sockaddr_in6>();
            Some(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_among_them() {
        let ips = host_ips();
        assert!(ips.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)), "{ips:?}");
    }
}
