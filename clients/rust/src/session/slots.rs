//! Which Redis Cluster master serves a key, as this client last read it
//! (`CLUSTER SLOTS`): a session's lease lives on one node, so a hold must
//! attach to the lease of its key's node. Read once, and again when a
//! server's answer shows it stale (`NOLEASE` on an acquire, `0` from a
//! keepalive whose route may have moved).
//!
//! The commands to a node are sent through redis-rs' own routing, by a
//! slot the node serves ([`LockConnection::query_node`]), so that a
//! failover (the promoted replica has the replicated lease) is followed as
//! redis-rs follows it.

use std::sync::Mutex;

use redis::Value;

use crate::conn::LockConnection;
use crate::error::{unexpected_reply, Result};

/// The number of hash slots.
const SLOTS: u16 = 16384;

/// A range of slots and the id of the master that serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SlotRange {
    start: u16,
    end: u16,
    node: String,
}

/// The slot map of one cluster connection.
pub(crate) struct Topology {
    conn: LockConnection,
    /// Empty until read.
    ranges: Mutex<Vec<SlotRange>>,
}

impl Topology {
    pub(crate) fn new(conn: LockConnection) -> Topology {
        Topology {
            conn,
            ranges: Mutex::new(Vec::new()),
        }
    }

    fn ranges(&self) -> std::sync::MutexGuard<'_, Vec<SlotRange>> {
        // A panic while it was held left nothing half-done in it.
        self.ranges
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Read the slot map again (`CLUSTER SLOTS`).
    pub(crate) async fn refresh(&self) -> Result<()> {
        let reply: Vec<Value> = self.conn.query(redis::cmd("CLUSTER").arg("SLOTS")).await?;
        let ranges = parse_slots(reply)?;
        *self.ranges() = ranges;
        Ok(())
    }

    /// The master that serves `key` (its node id), and the slot to route
    /// its lease commands by (the first slot it serves, so that every key
    /// of a node routes its session the same way).
    pub(crate) async fn node_of(&self, key: &[u8]) -> Result<(String, u16)> {
        let slot = key_slot(key);
        if let Some(found) = self.lookup(slot) {
            return Ok(found);
        }
        self.refresh().await?;
        self.lookup(slot)
            .ok_or_else(|| unexpected_reply("CLUSTER SLOTS", "no master serves the key's slot"))
    }

    fn lookup(&self, slot: u16) -> Option<(String, u16)> {
        let ranges = self.ranges();
        let node = &ranges
            .iter()
            .find(|r| r.start <= slot && slot <= r.end)?
            .node;
        let route = first_slot(&ranges, node)?;
        Some((node.clone(), route))
    }

    /// The slot to route node `node`'s lease commands by now, if it still
    /// serves any.
    pub(crate) fn route_of(&self, node: &str) -> Option<u16> {
        first_slot(&self.ranges(), node)
    }
}

fn first_slot(ranges: &[SlotRange], node: &str) -> Option<u16> {
    ranges
        .iter()
        .filter(|r| r.node == node)
        .map(|r| r.start)
        .min()
}

/// `CLUSTER SLOTS`: `[[start, end, [host, port, id, …], replicas…], …]`.
fn parse_slots(reply: Vec<Value>) -> Result<Vec<SlotRange>> {
    let bad = || unexpected_reply("CLUSTER SLOTS", "a slot range");
    let mut ranges = Vec::with_capacity(reply.len());
    for entry in reply {
        let Value::Array(fields) = entry else {
            return Err(bad());
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return Err(bad());
        };
        let node = match master.get(2) {
            Some(Value::BulkString(id)) => String::from_utf8_lossy(id).into_owned(),
            Some(Value::SimpleString(id)) => id.clone(),
            _ => return Err(bad()),
        };
        let (Ok(start), Ok(end)) = (u16::try_from(*start), u16::try_from(*end)) else {
            return Err(bad());
        };
        if start > end || end >= SLOTS {
            return Err(bad());
        }
        ranges.push(SlotRange { start, end, node });
    }
    Ok(ranges)
}

/// The hash slot of `key`: CRC16 (XMODEM) of its hash tag (the part
/// between the first `{` and the next `}`, when not empty) or of the whole
/// key, modulo 16384, as Redis Cluster computes it.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % SLOTS
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_cluster_s() {
        // CLUSTER KEYSLOT, from Redis' own documentation and tests.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"{user1000}.following"), 3443);
        assert_eq!(
            key_slot(b"{user1000}.followers"),
            key_slot(b"{user1000}.following")
        );
        // An empty tag hashes the whole key.
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_eq!(key_slot(b"foo{{bar}}zap"), crc16(b"{bar") % SLOTS);
    }

    #[test]
    fn a_slot_map_is_read_and_looked_up() {
        let node = |id: &str| {
            Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(7000),
                Value::BulkString(id.as_bytes().to_vec()),
            ])
        };
        let reply = vec![
            Value::Array(vec![Value::Int(0), Value::Int(5460), node("a")]),
            Value::Array(vec![Value::Int(5461), Value::Int(10922), node("b")]),
            Value::Array(vec![Value::Int(10923), Value::Int(16383), node("a")]),
        ];
        let ranges = parse_slots(reply).unwrap();
        assert_eq!(first_slot(&ranges, "a"), Some(0));
        assert_eq!(first_slot(&ranges, "b"), Some(5461));
        assert_eq!(first_slot(&ranges, "c"), None);
        assert!(parse_slots(vec![Value::Int(1)]).is_err());
        assert!(parse_slots(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(16384),
            node("a")
        ])])
        .is_err());
    }
}
