//! DUMP payloads of locks: Redis' CRC64, DUMP and RESTORE, and a builder for
//! hand-made lock payloads (valid ones with any token and fence, and broken
//! ones for the loader).

use super::{acquire, release, Connection, Value};

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

/// Where a lock's fence sits, counted from the end of its DUMP payload:
/// `02 81 <fence: 8 bytes BE>`, the module EOF opcode `00`, 2 bytes RDB
/// version, 8 bytes CRC64 (LE).
const FENCE_FROM_END: usize = 8 + 2 + 1 + 8;

/// The fence stored in a lock's DUMP payload.
pub fn fence_in_payload(payload: &[u8]) -> u64 {
    let at = payload.len() - FENCE_FROM_END;
    u64::from_be_bytes(payload[at..at + 8].try_into().unwrap())
}

/// A valid DUMP payload of a lock held by `token` with fence `fence`, built
/// from what a real DUMP on `con` shows (see [`PayloadKit`]).
pub fn lock_payload(con: &mut Connection, token: &str, fence: u64) -> Vec<u8> {
    PayloadKit::learn(con).lock(token.as_bytes(), fence)
}

/// Builds lock payloads the way this server DUMPs them:
/// `[type][0x81 module-id (8 bytes, encver in the low 10 bits)]`
/// `[0x05 len token][0x02 0x81 fence (8 bytes BE)][0x00 EOF]`
/// `[rdb version (2 bytes LE)][crc64 (8 bytes LE)]`.
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
        assert_eq!(real[25], 0x00, "EOF opcode: {real:02x?}");
        assert_eq!(n, 26 + 10);
        let id = u64::from_be_bytes(real[2..10].try_into().unwrap());
        assert_eq!(id & 1023, 1, "encoding version: {real:02x?}");
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

    /// The payload body up to and including the EOF opcode.
    pub fn body(&self, encver: u64, token: &[u8], fence: u64) -> Vec<u8> {
        let mut body = self.header_with_encver(encver);
        body.push(0x05);
        body.extend(rdb_len(token.len() as u64));
        body.extend(token);
        body.extend([0x02, 0x81]);
        body.extend(fence.to_be_bytes());
        body.push(0x00);
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
        self.seal(&self.body(1, token, fence))
    }
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
