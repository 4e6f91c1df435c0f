//! File and chunk framing.
//!
//! ```text
//! file   := magic "GPUTRACE" | u16 major | u16 minor | u32 reserved  (16 bytes)
//!           chunk*            (the first chunk is the header)
//! chunk  := frame (24 bytes) | payload
//! frame  := "GTCK" | u16 chunk_kind | u16 flags | u32 payload_len | u32 raw_len
//!           | u32 crc32(payload) | u32 crc32(frame bytes 0..20)
//! payload:= varint meta_len | meta | body   (body zstd-compressed if flags & COMPRESSED;
//!           raw_len is the body's length after decompression)
//! ```
//! All integers little-endian. Each chunk is self-delimiting and checksummed,
//! so a reader can stop cleanly at the first damaged or cut-off chunk.

/// File magic.
pub const MAGIC: &[u8; 8] = b"GPUTRACE";
/// Format major version this build writes and reads.
pub const FORMAT_MAJOR: u16 = 1;
/// Format minor version this build writes (readers accept any minor).
pub const FORMAT_MINOR: u16 = 7;
/// Length of the file preamble.
pub const PREAMBLE_LEN: usize = 16;
/// Chunk sync marker.
pub const CHUNK_SYNC: &[u8; 4] = b"GTCK";
/// Length of a chunk frame.
pub const FRAME_LEN: usize = 24;
/// Largest payload a writer produces or a reader accepts.
pub const MAX_PAYLOAD: u32 = 64 << 20;
/// Largest decompressed body a reader accepts (bounds decompression bombs).
pub const MAX_RAW: u32 = 256 << 20;

/// Flag: the body is zstd-compressed.
pub const FLAG_COMPRESSED: u16 = 1;
/// Flag: a reader that does not know this chunk kind must refuse the file
/// instead of skipping the chunk.
pub const FLAG_CRITICAL: u16 = 2;

/// Chunk kinds. Readers skip kinds they do not know unless `FLAG_CRITICAL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum ChunkKind {
    /// JSON [`crate::Header`]; always the first chunk.
    Header = 1,
    /// Strings appended to the string table.
    Strings = 2,
    /// Events of one kind on one track.
    Events = 3,
    /// JSON [`crate::Trailer`]; written by a clean finish.
    Trailer = 4,
    /// JSON list of [`crate::Communicator`]s, written as communicators
    /// appear (format 1.1; older readers skip it).
    Communicators = 5,
    /// JSON list of [`crate::CaptureWindow`]s, written as each capture
    /// window of a duty-cycled capture closes (format 1.3; older readers
    /// skip it).
    CaptureWindows = 6,
    /// Host samples: CPU state and Python stacks of the job's threads
    /// (format 1.4; older readers skip it). See [`crate::host`].
    HostSamples = 7,
}

impl ChunkKind {
    /// Known kind for a raw number.
    pub fn from_u16(v: u16) -> Option<ChunkKind> {
        match v {
            1 => Some(ChunkKind::Header),
            2 => Some(ChunkKind::Strings),
            3 => Some(ChunkKind::Events),
            4 => Some(ChunkKind::Trailer),
            5 => Some(ChunkKind::Communicators),
            6 => Some(ChunkKind::CaptureWindows),
            7 => Some(ChunkKind::HostSamples),
            _ => None,
        }
    }
}

/// A decoded frame.
#[derive(Clone, Copy, Debug)]
pub struct Frame {
    /// Raw chunk kind.
    pub kind: u16,
    /// Flags.
    pub flags: u16,
    /// Payload length on disk.
    pub payload_len: u32,
    /// Body length after decompression.
    pub raw_len: u32,
    /// CRC-32 of the payload.
    pub payload_crc: u32,
}

impl Frame {
    /// The frame of a chunk of `kind` with `flags` whose payload (as
    /// stored) is `payload` and whose body is `raw_len` bytes once
    /// decompressed.
    pub fn of(kind: u16, flags: u16, payload: &[u8], raw_len: usize) -> Frame {
        Frame {
            kind,
            flags,
            payload_len: payload.len() as u32,
            raw_len: raw_len as u32,
            payload_crc: crc32fast::hash(payload),
        }
    }

    /// Serialize with its own checksum.
    pub fn encode(&self) -> [u8; FRAME_LEN] {
        let mut b = [0u8; FRAME_LEN];
        b[0..4].copy_from_slice(CHUNK_SYNC);
        b[4..6].copy_from_slice(&self.kind.to_le_bytes());
        b[6..8].copy_from_slice(&self.flags.to_le_bytes());
        b[8..12].copy_from_slice(&self.payload_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.raw_len.to_le_bytes());
        b[16..20].copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = crc32fast::hash(&b[0..20]);
        b[20..24].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parse and verify a frame. The error says what is wrong.
    pub fn decode(b: &[u8; FRAME_LEN]) -> Result<Frame, &'static str> {
        if &b[0..4] != CHUNK_SYNC {
            return Err("no chunk marker where a chunk should start");
        }
        let le32 = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if crc32fast::hash(&b[0..20]) != le32(20) {
            return Err("chunk frame checksum mismatch");
        }
        let f = Frame {
            kind: u16::from_le_bytes([b[4], b[5]]),
            flags: u16::from_le_bytes([b[6], b[7]]),
            payload_len: le32(8),
            raw_len: le32(12),
            payload_crc: le32(16),
        };
        if f.payload_len > MAX_PAYLOAD {
            return Err("chunk payload length exceeds the format's limit");
        }
        if f.raw_len > MAX_RAW {
            return Err("chunk body length exceeds the format's limit");
        }
        Ok(f)
    }
}

/// The 16-byte file preamble.
pub fn preamble() -> [u8; PREAMBLE_LEN] {
    let mut b = [0u8; PREAMBLE_LEN];
    b[0..8].copy_from_slice(MAGIC);
    b[8..10].copy_from_slice(&FORMAT_MAJOR.to_le_bytes());
    b[10..12].copy_from_slice(&FORMAT_MINOR.to_le_bytes());
    b
}
