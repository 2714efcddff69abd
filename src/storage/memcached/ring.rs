//! A consistent-hash ring over memcached servers (ketama-style): each server owns many points on
//! a 64-bit circle, derived from its name alone, and a key belongs to the first point at or after
//! its hash. Every replica therefore maps keys identically whatever the order of its server
//! list, and adding one server to N moves about 1/(N+1) of the keys (crc32 mod N, the
//! reference's scheme, moves most of them).

use xxhash_rust::xxh3::xxh3_64;

const POINTS_PER_SERVER: usize = 160;

/// The ring: sorted points, each naming an index into the server list.
#[derive(Debug, Clone)]
pub(crate) struct Ring {
    points: Vec<(u64, usize)>,
}

impl Ring {
    /// A ring over `servers` (names such as `10.0.0.1:11211`).
    pub(crate) fn new(servers: &[String]) -> Ring {
        let mut points = Vec::with_capacity(servers.len() * POINTS_PER_SERVER);
        for (index, name) in servers.iter().enumerate() {
            for replica in 0..POINTS_PER_SERVER {
                points.push((xxh3_64(format!("{name}-{replica}").as_bytes()), index));
            }
        }
        // Ties (vanishingly rare) are broken by server name, never by list position.
        points.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| servers[a.1].cmp(&servers[b.1])));
        Ring { points }
    }

    /// The index of the server owning `key`; `None` for an empty ring.
    pub(crate) fn server_for(&self, key: &[u8]) -> Option<usize> {
        let hash = xxh3_64(key);
        let at = self.points.partition_point(|(p, _)| *p < hash);
        self.points
            .get(at)
            .or_else(|| self.points.first())
            .map(|(_, s)| *s)
    }
}

#[cfg(test)]
mod tests {
    use super::Ring;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn list_order_does_not_matter() {
        let a = names(&["m1:11211", "m2:11211", "m3:11211"]);
        let b = names(&["m3:11211", "m1:11211", "m2:11211"]);
        let (ra, rb) = (Ring::new(&a), Ring::new(&b));
        for i in 0..10_000 {
            let key = format!("key-{i}");
            let sa = ra.server_for(key.as_bytes()).map(|s| &a[s]);
            let sb = rb.server_for(key.as_bytes()).map(|s| &b[s]);
            assert_eq!(sa, sb);
        }
    }

    #[test]
    fn adding_a_fourth_server_moves_about_a_quarter_and_spreads_evenly() {
        let three = names(&["m1:11211", "m2:11211", "m3:11211"]);
        let four = names(&["m1:11211", "m2:11211", "m3:11211", "m4:11211"]);
        let (r3, r4) = (Ring::new(&three), Ring::new(&four));
        let total = 100_000;
        let mut moved = 0;
        let mut per_server = [0usize; 4];
        for i in 0..total {
            let key = format!("domain|k=v{i}|60@0");
            let s3 = r3.server_for(key.as_bytes()).map(|s| three[s].clone());
            let s4 = r4.server_for(key.as_bytes()).expect("server");
            per_server[s4] += 1;
            if s3.as_deref() != Some(four[s4].as_str()) {
                moved += 1;
            }
        }
        let part = moved as f64 / total as f64;
        assert!((0.18..0.32).contains(&part), "moved {part}");
        for count in per_server {
            assert!(count > total / 6 && count < total / 3, "{per_server:?}");
        }
    }

    #[test]
    fn empty_ring_has_no_server() {
        assert_eq!(Ring::new(&[]).server_for(b"k"), None);
    }
}
