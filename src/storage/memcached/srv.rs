//! DNS SRV discovery of memcached servers (`MEMCACHE_SRV`, e.g. a Kubernetes headless
//! Service's `_memcache._tcp.memcached.ns.svc.cluster.local`). A small resolver of our own: one
//! SRV question over UDP (TCP when the answer is truncated) to the first `nameserver` of
//! `/etc/resolv.conf`, trying the `search` domains when the name is not found. Targets come back
//! as `host:port`, sorted, so every replica builds the same list.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

const TYPE_SRV: u16 = 33;
const CLASS_IN: u16 = 1;
const TIMEOUT: Duration = Duration::from_secs(2);

/// Why a lookup failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SRV lookup of {name}: {problem}")]
pub struct SrvError {
    /// The name looked up.
    pub name: String,
    /// What went wrong.
    pub problem: String,
}

/// The resolver to ask and the search domains, from `/etc/resolv.conf` unless given.
#[derive(Debug, Clone)]
pub struct Resolver {
    /// The name server.
    pub server: SocketAddr,
    /// `search` domains.
    pub search: Vec<String>,
}

impl Resolver {
    /// From `/etc/resolv.conf` (or 127.0.0.1:53 when it names no server).
    pub fn system() -> Resolver {
        let text = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
        let mut server = None;
        let mut search = Vec::new();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") if server.is_none() => {
                    server = words
                        .next()
                        .and_then(|ip| ip.parse::<std::net::IpAddr>().ok())
                        .map(|ip| SocketAddr::new(ip, 53));
                }
                Some("search" | "domain") => search = words.map(str::to_owned).collect(),
                _ => {}
            }
        }
        Resolver {
            server: server.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 53))),
            search,
        }
    }

    /// The `host:port` targets of `name`, sorted.
    pub async fn lookup(&self, name: &str) -> Result<Vec<String>, SrvError> {
        let err = |problem: String| SrvError {
            name: name.to_owned(),
            problem,
        };
        let mut candidates = vec![name.trim_end_matches('.').to_owned()];
        if !name.ends_with('.') {
            candidates.extend(
                self.search
                    .iter()
                    .map(|d| format!("{}.{d}", name.trim_end_matches('.'))),
            );
        }
        let mut last = String::from("no answer");
        for candidate in candidates {
            match tokio::time::timeout(TIMEOUT, self.query(&candidate)).await {
                Ok(Ok(Some(mut targets))) if !targets.is_empty() => {
                    targets.sort();
                    targets.dedup();
                    return Ok(targets);
                }
                Ok(Ok(_)) => last = "no such name or no SRV records".into(),
                Ok(Err(problem)) => last = problem,
                Err(_) => last = format!("no answer from {} within {TIMEOUT:?}", self.server),
            }
        }
        Err(err(last))
    }

    /// One question; `Ok(None)` for NXDOMAIN.
    async fn query(&self, name: &str) -> Result<Option<Vec<String>>, String> {
        let id = (std::process::id() as u16)
            ^ (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0) as u16);
        let question = encode_query(id, name)?;
        let bind = if self.server.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        };
        let socket = UdpSocket::bind(bind).await.map_err(|e| e.to_string())?;
        socket
            .send_to(&question, self.server)
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 4096];
        let answer = loop {
            let (n, from) = socket
                .recv_from(&mut buf)
                .await
                .map_err(|e| e.to_string())?;
            if from == self.server && n >= 12 && u16::from_be_bytes([buf[0], buf[1]]) == id {
                break buf[..n].to_vec();
            }
        };
        let truncated = answer[2] & 0x02 != 0;
        let answer = if truncated {
            self.query_tcp(&question).await?
        } else {
            answer
        };
        parse_answer(&answer, id)
    }

    async fn query_tcp(&self, question: &[u8]) -> Result<Vec<u8>, String> {
        let mut stream = TcpStream::connect(self.server)
            .await
            .map_err(|e| e.to_string())?;
        let len = u16::try_from(question.len()).map_err(|e| e.to_string())?;
        stream
            .write_all(&len.to_be_bytes())
            .await
            .map_err(|e| e.to_string())?;
        stream
            .write_all(question)
            .await
            .map_err(|e| e.to_string())?;
        let len = stream.read_u16().await.map_err(|e| e.to_string())?;
        let mut answer = vec![0u8; usize::from(len)];
        stream
            .read_exact(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        Ok(answer)
    }
}

/// A DNS query for the SRV records of `name` (recursion desired).
pub fn encode_query(id: u16, name: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(32 + name.len());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        let len = u8::try_from(label.len())
            .ok()
            .filter(|l| (1..=63).contains(l))
            .ok_or_else(|| format!("bad label '{label}'"))?;
        out.push(len);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out.extend_from_slice(&TYPE_SRV.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    Ok(out)
}

/// Reads a (possibly compressed) name at `at`; returns it and the offset after it.
pub fn read_name(msg: &[u8], mut at: usize) -> Result<(String, usize), String> {
    let mut labels = Vec::new();
    let mut end = None;
    for _ in 0..128 {
        let len = *msg.get(at).ok_or("truncated name")?;
        match len {
            0 => {
                let after = end.unwrap_or(at + 1);
                return Ok((labels.join("."), after));
            }
            l if l & 0xC0 == 0xC0 => {
                let low = *msg.get(at + 1).ok_or("truncated pointer")?;
                end.get_or_insert(at + 2);
                at = usize::from(u16::from_be_bytes([l & 0x3F, low]));
            }
            l => {
                let label = msg
                    .get(at + 1..at + 1 + usize::from(l))
                    .ok_or("truncated label")?;
                labels.push(String::from_utf8_lossy(label).into_owned());
                at += 1 + usize::from(l);
            }
        }
    }
    Err("name compression loop".into())
}

fn u16_at(msg: &[u8], at: usize) -> Result<u16, String> {
    msg.get(at..at + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]))
        .ok_or_else(|| "truncated answer".into())
}

/// The `host:port` SRV targets in a DNS answer; `None` for NXDOMAIN.
pub fn parse_answer(msg: &[u8], id: u16) -> Result<Option<Vec<String>>, String> {
    if msg.len() < 12 || u16_at(msg, 0)? != id {
        return Err("answer does not match the question".into());
    }
    match msg[3] & 0x0F {
        0 => {}
        3 => return Ok(None),
        rcode => return Err(format!("server answered rcode {rcode}")),
    }
    let (questions, answers) = (u16_at(msg, 4)?, u16_at(msg, 6)?);
    let mut at = 12;
    for _ in 0..questions {
        at = read_name(msg, at)?.1 + 4;
    }
    let mut targets = Vec::new();
    for _ in 0..answers {
        at = read_name(msg, at)?.1;
        let (kind, len) = (u16_at(msg, at)?, usize::from(u16_at(msg, at + 8)?));
        let data = at + 10;
        if kind == TYPE_SRV {
            let port = u16_at(msg, data + 4)?;
            let (target, _) = read_name(msg, data + 6)?;
            targets.push(format!("{target}:{port}"));
        }
        at = data + len;
    }
    Ok(Some(targets))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer as a server would build it, with the target compressed against the question.
    fn answer(id: u16, name: &str, records: &[(&str, u16)]) -> Vec<u8> {
        let mut msg = encode_query(id, name).expect("query");
        msg[2] = 0x81;
        msg[3] = 0x80;
        msg[7] = records.len() as u8;
        for (target, port) in records {
            msg.extend_from_slice(&[0xC0, 12, 0, 33, 0, 1, 0, 0, 0, 30]);
            let mut rdata = vec![0, 10, 0, 60];
            rdata.extend_from_slice(&port.to_be_bytes());
            for label in target.split('.') {
                rdata.push(label.len() as u8);
                rdata.extend_from_slice(label.as_bytes());
            }
            rdata.push(0);
            msg.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
            msg.extend_from_slice(&rdata);
        }
        msg
    }

    #[test]
    fn parses_srv_answers() {
        let msg = answer(
            7,
            "_mc._tcp.example.test",
            &[("mc-b.example.test", 11212), ("mc-a.example.test", 11211)],
        );
        let targets = parse_answer(&msg, 7).expect("parse").expect("found");
        assert_eq!(
            targets,
            vec!["mc-b.example.test:11212", "mc-a.example.test:11211"]
        );
        assert!(parse_answer(&msg, 8).is_err(), "wrong id");
        let mut nx = msg.clone();
        nx[3] = 0x83;
        assert_eq!(parse_answer(&nx, 7), Ok(None));
        assert!(parse_answer(&msg[..msg.len() - 3], 7).is_err(), "truncated");
    }

    #[test]
    fn rejects_compression_loops_and_bad_names() {
        let msg = [0u8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xC0, 12];
        assert!(read_name(&msg, 12).is_err());
        assert!(encode_query(1, &format!("{}.x", "a".repeat(64))).is_err());
    }
}
