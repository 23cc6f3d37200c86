//! Which worker thread a connection belongs to.
//!
//! A connection goes to the worker matching the CPU that handled its packets
//! (`SO_INCOMING_CPU`: the sending thread's CPU on loopback, the receive queue's CPU with a
//! multi-queue NIC), so all connections of one client thread meet one worker. Client threads
//! that connected from one CPU and then spread out are caught up with: once a second each
//! worker counts its busy connections by the CPU their packets now arrive on, and hands an
//! idle one to the worker chosen for its CPU (`homes`). The scheduler
//! then keeps each client thread and its worker together, and a wake-up between them is
//! cheap and batches many requests. Round-robin instead makes every client thread wake
//! every worker: on the 2-core benchmark machine, 64 connections from 2 client threads ran
//! at ~210-245K requests/s round-robin and ~350-380K steered.
//!
//! Steering never lets a worker get more than `SLACK` open connections ahead of the least
//! loaded one, so when all connections arrive on one CPU (one client thread, a single-queue
//! NIC) the workers still share them almost evenly.

/// Open connections a worker may hold beyond the least loaded worker's before a connection
/// that prefers it goes elsewhere.
pub const SLACK: usize = 8;

/// The worker for a new connection, given the CPU its packets arrived on (if known) and each
/// worker's open connections. `rr` rotates among equally loaded workers.
pub fn choose(incoming_cpu: Option<usize>, open: &[usize], rr: &mut usize) -> usize {
    let n = open.len();
    if let Some(cpu) = incoming_cpu {
        let w = cpu % n;
        if has_room(w, open) {
            return w;
        }
    }
    // Round-robin over the least loaded workers.
    let least = open.iter().copied().min().unwrap_or(0);
    for i in 0..n {
        let w = (*rr + i) % n;
        if open[w] == least {
            *rr = w + 1;
            return w;
        }
    }
    0
}

/// The CPU that last processed packets of socket `fd`, if the kernel knows.
pub fn incoming_cpu(fd: i32) -> Option<usize> {
    let mut cpu: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the int we own.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_INCOMING_CPU,
            (&mut cpu as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    usize::try_from(cpu).ok().filter(|_| r == 0)
}

/// Whether worker `me` is home to the CPU groups of (nearly) all its busy connections, given
/// how many it serves per group (`mine`) and the groups' homes. Such a worker's clients wait
/// on it alone: when it runs out of their requests it blocks by itself, so it need not step
/// aside for them (see `worker::BUSY_MAX`).
pub fn settled(me: usize, mine: &[usize; CPU_GROUPS], homes: &[Option<usize>; CPU_GROUPS]) -> bool {
    let total: usize = mine.iter().sum();
    let at_home: usize = mine
        .iter()
        .zip(homes)
        .filter(|(_, home)| **home == Some(me))
        .map(|(count, _)| count)
        .sum();
    total > 0 && at_home * 10 >= total * 9
}

/// CPUs are told apart modulo this many when connections are grouped by CPU.
pub const CPU_GROUPS: usize = 64;

/// Which worker should serve each CPU group, given `serving[w][g]`: how many busy
/// connections of group `g` worker `w` has. Groups go, largest share first, to the worker
/// already serving most of them (so a client thread's connections gather where most of them
/// are, whichever CPU that worker runs on now), each worker taking at most its fair number
/// of groups; ties go to the group's own worker (`g % workers`). Groups with no busy
/// connection get none.
pub fn homes(serving: &[[usize; CPU_GROUPS]]) -> [Option<usize>; CPU_GROUPS] {
    let n = serving.len();
    let mut home = [None; CPU_GROUPS];
    if n == 0 {
        return home;
    }
    let active: Vec<usize> = (0..CPU_GROUPS)
        .filter(|&g| serving.iter().any(|row| row[g] > 0))
        .collect();
    let fair = active.len().div_ceil(n).max(1);
    let mut pairs: Vec<(usize, usize)> = active
        .iter()
        .flat_map(|&g| (0..n).map(move |w| (g, w)))
        .collect();
    pairs.sort_by_key(|&(g, w)| (std::cmp::Reverse(serving[w][g]), g % n != w, g, w));
    let mut taken = vec![0usize; n];
    for (g, w) in pairs {
        if home[g].is_none() && taken[w] < fair {
            home[g] = Some(w);
            taken[w] += 1;
        }
    }
    home
}

/// Whether an idle connection may move from worker `from` to `to` given each worker's open
/// connections: never past `SLACK` ahead of the least loaded worker.
pub fn may_move(from: usize, to: usize, open: &[usize]) -> bool {
    from != to && has_room(to, open)
}

/// Whether worker `w` may take one more connection without getting more than `SLACK` ahead
/// of the least loaded worker.
fn has_room(w: usize, open: &[usize]) -> bool {
    let least = open.iter().copied().min().unwrap_or(0);
    open[w] < least + SLACK
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(cpus: &[Option<usize>], workers: usize) -> Vec<usize> {
        let mut open = vec![0; workers];
        let mut rr = 0;
        cpus.iter()
            .map(|&c| {
                let w = choose(c, &open, &mut rr);
                open[w] += 1;
                w
            })
            .collect()
    }

    #[test]
    fn connections_follow_their_cpu() {
        let cpus: Vec<Option<usize>> = (0..64).map(|i| Some(i % 2)).collect();
        let got = place(&cpus, 2);
        assert!(got.iter().zip(&cpus).all(|(&w, c)| Some(w) == *c));
        // More CPUs than workers: CPU modulo workers.
        assert_eq!(place(&[Some(5), Some(6), Some(7)], 4), vec![1, 2, 3]);
    }

    #[test]
    fn settled_when_nine_in_ten_busy_connections_are_at_home() {
        let mut homes = [None; CPU_GROUPS];
        homes[0] = Some(0);
        homes[1] = Some(1);
        let mut mine = [0; CPU_GROUPS];
        assert!(!settled(0, &mine, &homes), "no busy connection");
        mine[0] = 27;
        mine[1] = 3;
        assert!(settled(0, &mine, &homes));
        assert!(!settled(1, &mine, &homes), "home to only 3 of 30");
        mine[1] = 4;
        assert!(!settled(0, &mine, &homes), "27 of 31 is under 90%");
        // Connections of a group nobody is home to count against it.
        mine[1] = 0;
        mine[5] = 27;
        assert!(!settled(0, &mine, &homes));
    }

    #[test]
    fn one_cpu_still_spreads_past_the_slack() {
        let got = place(&[Some(0); 100], 2);
        let on0 = got.iter().filter(|&&w| w == 0).count();
        assert_eq!(&got[..SLACK], &[0; SLACK][..]);
        assert!(on0 - (100 - on0) <= SLACK, "{on0} of 100 on worker 0");
    }

    #[test]
    fn unknown_cpu_goes_round_robin_to_the_least_loaded() {
        assert_eq!(place(&[None; 6], 3), vec![0, 1, 2, 0, 1, 2]);
        let mut rr = 0;
        assert_eq!(choose(None, &[3, 1, 1], &mut rr), 1);
        assert_eq!(choose(None, &[3, 2, 1], &mut rr), 2);
    }

    fn table(rows: &[&[(usize, usize)]]) -> Vec<[usize; CPU_GROUPS]> {
        rows.iter()
            .map(|cells| {
                let mut row = [0; CPU_GROUPS];
                for &(g, c) in *cells {
                    row[g] = c;
                }
                row
            })
            .collect()
    }

    #[test]
    fn each_cpu_group_goes_to_the_worker_serving_most_of_it() {
        // Two client threads whose workers swapped CPUs: nothing should move.
        let h = homes(&table(&[&[(1, 32)], &[(0, 32)]]));
        assert_eq!((h[0], h[1]), (Some(1), Some(0)));
        // Both groups mostly on worker 0: it keeps the larger, the other goes to worker 1.
        let h = homes(&table(&[&[(0, 9), (1, 6)], &[(0, 2), (1, 3)]]));
        assert_eq!((h[0], h[1]), (Some(0), Some(1)));
        // Ties go to the group's own worker.
        let h = homes(&table(&[&[(0, 16), (1, 16)], &[(0, 16), (1, 16)]]));
        assert_eq!((h[0], h[1]), (Some(0), Some(1)));
        assert_eq!(h[2], None);
        // More groups than workers: each worker takes its fair number.
        let h = homes(&table(&[&[(0, 5), (1, 5), (2, 5)], &[]]));
        assert_eq!(h.iter().filter(|w| **w == Some(0)).count(), 2);
        assert_eq!(h.iter().filter(|w| **w == Some(1)).count(), 1);
    }

    #[test]
    fn moves_stay_within_the_slack() {
        assert!(may_move(0, 1, &[32, 32]));
        assert!(!may_move(1, 1, &[32, 32]));
        assert!(!may_move(0, 1, &[30, 30 + SLACK]));
        assert!(may_move(0, 1, &[30, 30 + SLACK - 1]));
    }

    #[test]
    fn a_worker_that_lost_connections_gets_new_ones() {
        let mut rr = 0;
        // Worker 1 closed most of its connections: even CPU 0's new connection goes there.
        assert_eq!(choose(Some(0), &[40, 10], &mut rr), 1);
        assert_eq!(choose(Some(0), &[17, 10], &mut rr), 0);
        assert_eq!(choose(Some(0), &[18, 10], &mut rr), 1);
    }
}
