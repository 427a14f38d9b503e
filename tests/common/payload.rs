//! DUMP payloads of locks: Redis' CRC64, DUMP and RESTORE, and a builder for
//! hand-made lock payloads (valid ones with any token and fence, and broken
//! ones for the loader).

use super::{acquire, now_ms, release, Connection, Value};

/// 2^53 - 1, the largest fence.
pub const MAX_FENCE: u64 = (1 << 53) - 1;

/// Redis' CRC64 (Jones polynomial, reflected, init 0, no final xor), as DUMP
/// payloads carry it.
pub fn crc64(data: &[u8]) -> u64 {
    const POLY_REFLECTED: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc = 0u64;
    for &byte in data {
        crc ^= u64::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY_REFLECTED
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// `DUMP key`; panics when the key does not exist.
pub fn dump(con: &mut Connection, key: &str) -> Vec<u8> {
    redis::cmd("DUMP")
        .arg(key)
        .query::<Option<Vec<u8>>>(con)
        .expect("DUMP")
        .unwrap_or_else(|| panic!("DUMP {key}: no such key"))
}

/// `RESTORE key ttl-ms payload`, with the server's reply or error.
pub fn restore(
    con: &mut Connection,
    key: &str,
    ttl_ms: i64,
    payload: &[u8],
) -> redis::RedisResult<Value> {
    redis::cmd("RESTORE")
        .arg(key)
        .arg(ttl_ms)
        .arg(payload)
        .query::<Value>(con)
}

/// `DEBUG SET-SKIP-CHECKSUM-VALIDATION`: with `on`, RESTORE takes payloads
/// whatever their CRC64.
pub fn skip_checksum(con: &mut Connection, on: bool) {
    let _: Value = redis::cmd("DEBUG")
        .arg("SET-SKIP-CHECKSUM-VALIDATION")
        .arg(if on { 1 } else { 0 })
        .query(con)
        .expect("DEBUG SET-SKIP-CHECKSUM-VALIDATION");
}

/// The fence stored in a lock's DUMP payload: right after the token.
pub fn fence_in_payload(payload: &[u8]) -> u64 {
    assert_eq!(payload[10], 0x05, "token opcode: {payload:02x?}");
    let (token_len, used) = rdb_len_decode(&payload[11..]);
    let at = 11 + used + token_len as usize;
    assert_eq!(&payload[at..at + 2], &[0x02, 0x81], "fence: {payload:02x?}");
    u64::from_be_bytes(payload[at + 2..at + 10].try_into().unwrap())
}

/// Decode an RDB length: (value, bytes used).
pub fn rdb_len_decode(bytes: &[u8]) -> (u64, usize) {
    match bytes[0] >> 6 {
        0 => (u64::from(bytes[0] & 0x3f), 1),
        1 => ((u64::from(bytes[0] & 0x3f) << 8) | u64::from(bytes[1]), 2),
        _ if bytes[0] == 0x80 => (
            u64::from(u32::from_be_bytes(bytes[1..5].try_into().unwrap())),
            5,
        ),
        _ => (u64::from_be_bytes(bytes[1..9].try_into().unwrap()), 9),
    }
}

/// A valid DUMP payload of a lock held by `token` with fence `fence`, built
/// from what a real DUMP on `con` shows (see [`PayloadKit`]).
pub fn lock_payload(con: &mut Connection, token: &str, fence: u64) -> Vec<u8> {
    PayloadKit::learn(con).lock(token.as_bytes(), fence)
}

/// Builds lock payloads the way this server DUMPs them (encoding 4):
/// `[type][0x81 module-id (8 bytes, encver in the low 10 bits)]`
/// `[0x05 len token][0x02 0x81 fence (8 bytes BE)]`
/// `[0x02 0x81 granted-ms][0x02 0x81 deadline-ms][0x02 len extends]`
/// `[0x05 len owner (empty: none)][0x02 0x00 no lease group]`
/// `[0x00 EOF][rdb version (2 bytes LE)][crc64 (8 bytes LE)]`;
/// encoding 3 has no lease group, encoding 2 no owner either, encoding 1
/// stops after the fence.
pub struct PayloadKit {
    /// Type byte, 0x81, module id: the first 10 bytes of a real DUMP.
    pub header: [u8; 10],
    pub rdb_version: [u8; 2],
}

impl PayloadKit {
    /// Learn the header and RDB version from a DUMP of a lock on `con` (a
    /// scratch key, released again), checking the layout and that [`crc64`]
    /// agrees with the server's checksum.
    pub fn learn(con: &mut Connection) -> PayloadKit {
        let (_, real_fence) = acquire(con, "__payload_kit", 60_000, Some("kit")).unwrap();
        let real = dump(con, "__payload_kit");
        assert_eq!(release(con, "__payload_kit", "kit"), 1);
        let n = real.len();
        assert_eq!(real[1], 0x81, "module id is a 64-bit length: {real:02x?}");
        assert_eq!(&real[10..12], &[0x05, 3], "token opcode: {real:02x?}");
        assert_eq!(&real[15..17], &[0x02, 0x81], "fence opcode: {real:02x?}");
        // Redis saves a signed value as the bits of an unsigned one.
        assert_eq!(&real[25..27], &[0x02, 0x81], "granted opcode: {real:02x?}");
        assert_eq!(&real[35..37], &[0x02, 0x81], "deadline opcode: {real:02x?}");
        assert_eq!(&real[45..47], &[0x02, 0x00], "extends: {real:02x?}");
        assert_eq!(&real[47..49], &[0x05, 0x00], "no owner: {real:02x?}");
        assert_eq!(&real[49..51], &[0x02, 0x00], "no lease group: {real:02x?}");
        assert_eq!(real[51], 0x00, "EOF opcode: {real:02x?}");
        assert_eq!(n, 52 + 10);
        let id = u64::from_be_bytes(real[2..10].try_into().unwrap());
        assert_eq!(id & 1023, 4, "encoding version: {real:02x?}");
        assert_eq!(fence_in_payload(&real), real_fence, "{real:02x?}");
        assert_eq!(
            crc64(&real[..n - 8]).to_le_bytes(),
            real[n - 8..],
            "CRC64 helper disagrees with the server: {real:02x?}"
        );
        PayloadKit {
            header: real[..10].try_into().unwrap(),
            rdb_version: real[n - 10..n - 8].try_into().unwrap(),
        }
    }

    pub fn header_with_encver(&self, encver: u64) -> Vec<u8> {
        let mut header = self.header.to_vec();
        let id = u64::from_be_bytes(header[2..10].try_into().unwrap());
        let id = (id & !1023) | (encver & 1023);
        header[2..10].copy_from_slice(&id.to_be_bytes());
        header
    }

    /// The payload body up to and including the EOF opcode, laid out as
    /// encoding 1 (token, fence), encoding 3 (then granted now, deadline
    /// unknown, no extensions, no owner), encoding 4 (then no lease group)
    /// or, for any other `encver`, as encoding 2 (encoding 3 without the
    /// owner).
    pub fn body(&self, encver: u64, token: &[u8], fence: u64) -> Vec<u8> {
        let mut body = self.fields(encver, token, fence);
        if encver != 1 {
            body.extend(self.v2_tail(now_ms() as u64, u64::MAX, 0));
        }
        if encver == 3 || encver == 4 {
            body.extend(owner_field(b""));
        }
        if encver == 4 {
            body.extend([0x02, 0x00]);
        }
        body.push(0x00);
        body
    }

    /// Encoding 2's fields after the fence: granted-ms, deadline-ms (as
    /// the unsigned bits of the signed value) and extends.
    pub fn v2_tail(&self, granted: u64, deadline: u64, extends: u64) -> Vec<u8> {
        let mut tail = vec![0x02];
        tail.extend(rdb_len(granted));
        tail.push(0x02);
        tail.extend(rdb_len(deadline));
        tail.push(0x02);
        tail.extend(rdb_len(extends));
        tail
    }

    /// Header, token and fence: what both encodings begin with.
    pub fn fields(&self, encver: u64, token: &[u8], fence: u64) -> Vec<u8> {
        let mut body = self.header_with_encver(encver);
        body.push(0x05);
        body.extend(rdb_len(token.len() as u64));
        body.extend(token);
        body.extend([0x02, 0x81]);
        body.extend(fence.to_be_bytes());
        body
    }

    /// `body` followed by the RDB version and a correct checksum.
    pub fn seal(&self, body: &[u8]) -> Vec<u8> {
        let mut payload = body.to_vec();
        payload.extend(self.rdb_version);
        let crc = crc64(&payload);
        payload.extend(crc.to_le_bytes());
        payload
    }

    /// A valid payload of a lock held by `token` with fence `fence`.
    pub fn lock(&self, token: &[u8], fence: u64) -> Vec<u8> {
        self.seal(&self.body(4, token, fence))
    }
}

/// Encoding 3's last field: the owner label as a string (empty: none).
pub fn owner_field(owner: &[u8]) -> Vec<u8> {
    let mut field = vec![0x05];
    field.extend(rdb_len(owner.len() as u64));
    field.extend(owner);
    field
}

/// RDB length encoding.
pub fn rdb_len(n: u64) -> Vec<u8> {
    if n < 64 {
        vec![n as u8]
    } else if n < 16384 {
        vec![0x40 | (n >> 8) as u8, n as u8]
    } else if n <= u64::from(u32::MAX) {
        let mut v = vec![0x80];
        v.extend((n as u32).to_be_bytes());
        v
    } else {
        let mut v = vec![0x81];
        v.extend(n.to_be_bytes());
        v
    }
}
