//! Redis Cluster, for the waiters of a key that is not on this node: a key's
//! hash slot, where this node's `CLUSTER NODES` says the slot is served, and
//! the redirect a waiter is answered with instead of a hand-off here.
//!
//! A classic reshard (`CLUSTER SETSLOT <slot> MIGRATING <target>` on the
//! source, then `MIGRATE … KEYS …`, then `CLUSTER SETSLOT <slot> NODE
//! <target>`) tells a module nothing but the `del` of each key that
//! `MIGRATE` moved. A lock that leaves that way is held on the target now:
//! its waiters here must go there, as Redis sends any client that asks the
//! source for a key it no longer has in a migrating slot (`ASK`), or for a
//! slot it no longer serves (`MOVED`). Pure: the module passes the text.

/// The number of hash slots.
pub const SLOTS: u16 = 16384;

/// The hash slot of `key`, as Redis computes it: CRC16 (XMODEM) of the key,
/// or of its hash tag (what lies between the first `{` and the first `}`
/// after it, when that is not empty), modulo 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    let tag = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    crc16(tag.unwrap_or(key)) % SLOTS
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

/// A node's client address, as `CLUSTER NODES` shows it (its IP, and the
/// port clients use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

/// Where a slot is served, as this node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotHere {
    /// By this node (on a replica: by its master), and not being migrated
    /// out; or being imported by this node (`SETSLOT … IMPORTING`, shown as
    /// `[slot-<-<source id>]`: a key that clients wait for here came here);
    /// or this node cannot tell (no `myself` line).
    Served,
    /// This node serves it but is migrating it out (`SETSLOT … MIGRATING`,
    /// shown as `[slot->-<target id>]` on its own line) to that node (`None`:
    /// its address is not known).
    Migrating(Option<Endpoint>),
    /// Another master serves it (`None`: no master is known for it).
    Elsewhere(Option<Endpoint>),
}

/// One line of `CLUSTER NODES`: `<id> <ip:port@cport[,hostname…]> <flags>
/// <master id or -> <ping> <pong> <epoch> <link> <slot or range or
/// [migration]>…`.
struct Line<'a> {
    id: &'a str,
    endpoint: Option<Endpoint>,
    flags: &'a str,
    master_id: &'a str,
    slots: Vec<&'a str>,
}

impl Line<'_> {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.split(',').any(|f| f == flag)
    }

    /// Whether its slot ranges (not its `[…]` migrations) include `slot`.
    fn serves(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .filter(|s| !s.starts_with('['))
            .any(|s| match s.split_once('-') {
                Some((a, b)) => match (a.parse::<u16>(), b.parse::<u16>()) {
                    (Ok(a), Ok(b)) => (a..=b).contains(&slot),
                    _ => false,
                },
                None => s.parse::<u16>() == Ok(slot),
            })
    }

    /// The node it is migrating `slot` to (`[slot->-<id>]`), if any.
    fn migrating_to(&self, slot: u16) -> Option<&str> {
        self.migration(slot, "->-")
    }

    /// Whether it imports `slot` (`[slot-<-<id>]`).
    fn imports(&self, slot: u16) -> bool {
        self.migration(slot, "-<-").is_some()
    }

    /// The other node of a `[slot<arrow><id>]` mark for `slot`.
    fn migration(&self, slot: u16, arrow: &str) -> Option<&str> {
        self.slots.iter().find_map(|s| {
            let inner = s.strip_prefix('[')?.strip_suffix(']')?;
            let (at, node) = inner.split_once(arrow)?;
            (at.parse::<u16>() == Ok(slot)).then_some(node)
        })
    }
}

fn parse_line(line: &str) -> Option<Line<'_>> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 8 {
        return None;
    }
    Some(Line {
        id: fields[0],
        endpoint: parse_endpoint(fields[1]),
        flags: fields[2],
        master_id: fields[3],
        slots: fields[8..].to_vec(),
    })
}

/// `ip:port@cport[,hostname…]` (or `ip:port`): the IP and the client port;
/// `None` for a node with no address yet (`:0@0`).
fn parse_endpoint(field: &str) -> Option<Endpoint> {
    let address = field.split(['@', ',']).next()?;
    let (host, port) = address.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    (!host.is_empty() && port > 0).then(|| Endpoint {
        host: host.to_string(),
        port,
    })
}

/// Where `slot` is served, as `nodes` (this node's `CLUSTER NODES`) shows it.
pub fn slot_here(nodes: &str, slot: u16) -> SlotHere {
    let lines: Vec<Line> = nodes.lines().filter_map(parse_line).collect();
    let Some(me) = lines.iter().find(|l| l.has_flag("myself")) else {
        return SlotHere::Served;
    };
    let endpoint_of = |id: &str| {
        lines
            .iter()
            .find(|l| l.id == id)
            .and_then(|l| l.endpoint.clone())
    };
    // A replica serves (reads of) its master's slots; only a master shows
    // its migrations.
    let shard_master = if me.has_flag("master") {
        Some(me)
    } else {
        lines.iter().find(|l| l.id == me.master_id)
    };
    if let Some(to) = me.migrating_to(slot) {
        return SlotHere::Migrating(endpoint_of(to));
    }
    if me.imports(slot) || shard_master.is_some_and(|m| m.serves(slot)) {
        return SlotHere::Served;
    }
    let owner = lines
        .iter()
        .filter(|l| l.has_flag("master") && l.serves(slot))
        // One that is not failing, if there is one.
        .min_by_key(|l| l.has_flag("fail"));
    SlotHere::Elsewhere(owner.and_then(|l| l.endpoint.clone()))
}

/// The error a client waiting here for `slot`'s key, which is not (or no
/// longer) on this node, is answered with instead of a grant here, as Redis
/// itself would answer it: `ASK` to the target while this node migrates the
/// slot (the key went there; the source still serves the slot's other
/// keys), `MOVED` to the owner once another node serves the slot,
/// `TRYAGAIN` when that node's address is not known. `None`: the slot is
/// served here; hand the key over here.
pub fn redirect(slot: u16, here: &SlotHere) -> Option<String> {
    match here {
        SlotHere::Served => None,
        SlotHere::Migrating(Some(to)) => Some(format!("ASK {slot} {}:{}", to.host, to.port)),
        SlotHere::Elsewhere(Some(owner)) => {
            Some(format!("MOVED {slot} {}:{}", owner.host, owner.port))
        }
        SlotHere::Migrating(None) | SlotHere::Elsewhere(None) => Some(format!(
            "TRYAGAIN slot {slot} is moving to another node, whose address this node does not \
             know yet; retry"
        )),
    }
}

/// [`redirect`] for `key`, by this node's `CLUSTER NODES` text.
pub fn redirect_for_absent(nodes: &str, key: &[u8]) -> Option<String> {
    let slot = key_slot(key);
    redirect(slot, &slot_here(nodes, slot))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_slots() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"hello"), 866);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        // An empty first tag: the whole key is hashed.
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b""), 0);
    }

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const C: &str = "cccccccccccccccccccccccccccccccccccccccc";
    const R: &str = "rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr";

    fn nodes(me: &str, a_slots: &str, b_slots: &str) -> String {
        let flags = |id: &str| {
            if id == me {
                "myself,master"
            } else {
                "master"
            }
        };
        let replica_flags = if me == R { "myself,slave" } else { "slave" };
        format!(
            "{A} 127.0.0.1:7000@17000,host-a {} - 0 0 1 connected {a_slots}\n\
             {B} 127.0.0.1:7001@17001 {} - 0 0 2 connected {b_slots}\n\
             {C} 127.0.0.1:7002@17002 {} - 0 0 3 connected 10923-16383\n\
             {R} 127.0.0.1:7003@17003 {replica_flags} {A} 0 0 1 connected\n",
            flags(A),
            flags(B),
            flags(C),
        )
    }

    fn at(port: u16) -> Option<Endpoint> {
        Some(Endpoint {
            host: "127.0.0.1".into(),
            port,
        })
    }

    #[test]
    fn a_stable_slot_is_served_by_its_master_and_its_replica() {
        let text = nodes(A, "0-5460", "5461-10922");
        assert_eq!(slot_here(&text, 0), SlotHere::Served);
        assert_eq!(slot_here(&text, 5460), SlotHere::Served);
        assert_eq!(redirect(5460, &slot_here(&text, 5460)), None);
        assert_eq!(
            slot_here(&nodes(R, "0-5460", "5461-10922"), 7),
            SlotHere::Served
        );
    }

    #[test]
    fn a_migrating_slot_sends_its_absent_keys_to_the_target_with_ask() {
        let text = nodes(A, &format!("0-5460 [5000->-{B}]"), "5461-10922");
        assert_eq!(slot_here(&text, 5000), SlotHere::Migrating(at(7001)));
        assert_eq!(
            redirect(5000, &slot_here(&text, 5000)).as_deref(),
            Some("ASK 5000 127.0.0.1:7001")
        );
        // Other slots of the source stay.
        assert_eq!(slot_here(&text, 4999), SlotHere::Served);
        // The target, importing it, serves the keys that came to it.
        let target = nodes(B, "0-5460", &format!("5461-10922 [5000-<-{A}]"));
        assert_eq!(slot_here(&target, 5000), SlotHere::Served);
        assert_eq!(slot_here(&target, 5001), SlotHere::Elsewhere(at(7000)));
    }

    #[test]
    fn a_slot_that_moved_gets_moved_to_its_owner() {
        // After `SETSLOT 5000 NODE b` on the source.
        let text = nodes(A, "0-4999 5001-5460", "5000 5461-10922");
        assert_eq!(slot_here(&text, 5000), SlotHere::Elsewhere(at(7001)));
        // `hello` is in slot 866, still the source's.
        assert_eq!(redirect_for_absent(&text, b"hello"), None);
        assert_eq!(
            redirect(5000, &slot_here(&text, 5000)).as_deref(),
            Some("MOVED 5000 127.0.0.1:7001")
        );
        // A replica of the old owner.
        let replica = nodes(R, "0-4999 5001-5460", "5000 5461-10922");
        assert_eq!(slot_here(&replica, 5000), SlotHere::Elsewhere(at(7001)));
    }

    #[test]
    fn unknown_addresses_and_owners_ask_to_retry() {
        let text = format!(
            "{A} 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-99 [50->-{B}]\n\
             {B} :0@0 master,noaddr - 0 0 2 disconnected\n"
        );
        assert_eq!(slot_here(&text, 50), SlotHere::Migrating(None));
        assert!(redirect(50, &slot_here(&text, 50))
            .unwrap()
            .starts_with("TRYAGAIN "));
        assert_eq!(slot_here(&text, 500), SlotHere::Elsewhere(None));
        // No `myself` line: cannot tell, so nothing changes.
        assert_eq!(slot_here("", 5), SlotHere::Served);
    }

    #[test]
    fn endpoints_are_read_with_or_without_extras() {
        let ten = Endpoint {
            host: "10.0.0.1".into(),
            port: 6379,
        };
        assert_eq!(parse_endpoint("10.0.0.1:6379@16379"), Some(ten));
        assert_eq!(
            parse_endpoint("127.0.0.1:7001@17001,h,shard-id=x"),
            at(7001)
        );
        assert_eq!(parse_endpoint("127.0.0.1:7001"), at(7001));
        assert_eq!(
            parse_endpoint("::1:7001@17001").map(|e| e.host),
            Some("::1".into())
        );
        assert_eq!(parse_endpoint(":0@0"), None);
    }
}
