//! The protobuf wire format, read from a borrowed buffer: varints, field keys, length-delimited
//! payloads (as slices of the buffer, never copied) and unknown fields skipped. It reads exactly
//! what prost's decoder reads and refuses what it refuses (a varint of more than ten bytes or
//! above 2^64, a key above 2^32, field number 0, wire types 6 and 7, a length past the end, an
//! end-group without its start, groups nested more than 100 deep), so that a message decodes the
//! same either way; `decode` says why it reads the request itself, and the property test and
//! fuzz target that compare the two.
//!
//! Must not touch: what any field means (`decode`).

/// Why a message could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WireProblem {
    /// A varint ran past the end, past ten bytes, or above 2^64.
    #[error("invalid varint")]
    Varint,
    /// A field key above 2^32.
    #[error("invalid key value: {0}")]
    Key(u64),
    /// Field number 0.
    #[error("invalid tag value: 0")]
    Tag,
    /// Wire type 6 or 7.
    #[error("invalid wire type value: {0}")]
    WireTypeValue(u64),
    /// A known field sent with another wire type than its own.
    #[error("invalid wire type: {actual:?} (expected {expected:?})")]
    WireType {
        /// The field's wire type.
        expected: WireType,
        /// The wire type that came.
        actual: WireType,
    },
    /// A length or fixed-size value past the end of its message.
    #[error("buffer underflow")]
    Underflow,
    /// An end-group key without its start-group.
    #[error("unexpected end group tag")]
    EndGroup,
    /// Groups nested deeper than prost's recursion limit.
    #[error("recursion limit reached")]
    Recursion,
}

/// How a field's value is laid out on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireType {
    /// A varint.
    Varint,
    /// Eight bytes.
    SixtyFourBit,
    /// A varint length, then that many bytes.
    LengthDelimited,
    /// A group's start (proto2).
    StartGroup,
    /// A group's end (proto2).
    EndGroup,
    /// Four bytes.
    ThirtyTwoBit,
}

/// The nesting prost allows a message being decoded (`prost::RECURSION_LIMIT`).
pub(crate) const RECURSION_LIMIT: u32 = 100;

/// The unread fields of one message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    /// Reads `message`.
    pub(crate) fn new(message: &'a [u8]) -> Self {
        Self { rest: message }
    }

    /// Whether the whole message has been read.
    pub(crate) fn is_done(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next field's number and wire type.
    pub(crate) fn key(&mut self) -> Result<(u32, WireType), WireProblem> {
        let key = self.varint()?;
        let key = u32::try_from(key).map_err(|_| WireProblem::Key(key))?;
        let wire_type = match key & 7 {
            0 => WireType::Varint,
            1 => WireType::SixtyFourBit,
            2 => WireType::LengthDelimited,
            3 => WireType::StartGroup,
            4 => WireType::EndGroup,
            5 => WireType::ThirtyTwoBit,
            other => return Err(WireProblem::WireTypeValue(u64::from(other))),
        };
        match key >> 3 {
            0 => Err(WireProblem::Tag),
            field => Ok((field, wire_type)),
        }
    }

    /// A varint: seven bits a byte, least significant first, at most ten bytes.
    pub(crate) fn varint(&mut self) -> Result<u64, WireProblem> {
        let mut value = 0u64;
        for (i, &byte) in self.rest.iter().take(10).enumerate() {
            value |= u64::from(byte & 0x7F) << (7 * i);
            if byte < 0x80 {
                if i == 9 && byte > 1 {
                    return Err(WireProblem::Varint);
                }
                self.rest = &self.rest[i + 1..];
                return Ok(value);
            }
        }
        Err(WireProblem::Varint)
    }

    /// The varint value of a field that must be one.
    pub(crate) fn varint_field(&mut self, wire_type: WireType) -> Result<u64, WireProblem> {
        expect(WireType::Varint, wire_type)?;
        self.varint()
    }

    /// The bytes of a length-delimited field (a `bytes` or `string` value, or a message).
    pub(crate) fn delimited(&mut self, wire_type: WireType) -> Result<&'a [u8], WireProblem> {
        expect(WireType::LengthDelimited, wire_type)?;
        let len = self.varint()?;
        self.take(len)
    }

    /// Passes over a field this message does not know; `depth` is what is left of the
    /// recursion limit (groups nest).
    pub(crate) fn skip(
        &mut self,
        wire_type: WireType,
        field: u32,
        depth: u32,
    ) -> Result<(), WireProblem> {
        if depth == 0 {
            return Err(WireProblem::Recursion);
        }
        let len = match wire_type {
            WireType::Varint => self.varint().map(|_| 0)?,
            WireType::ThirtyTwoBit => 4,
            WireType::SixtyFourBit => 8,
            WireType::LengthDelimited => self.varint()?,
            WireType::StartGroup => loop {
                match self.key()? {
                    (inner, WireType::EndGroup) if inner == field => break 0,
                    (_, WireType::EndGroup) => return Err(WireProblem::EndGroup),
                    (inner, wire_type) => self.skip(wire_type, inner, depth - 1)?,
                }
            },
            WireType::EndGroup => return Err(WireProblem::EndGroup),
        };
        self.take(len).map(|_| ())
    }

    fn take(&mut self, len: u64) -> Result<&'a [u8], WireProblem> {
        let len = usize::try_from(len).map_err(|_| WireProblem::Underflow)?;
        if len > self.rest.len() {
            return Err(WireProblem::Underflow);
        }
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(taken)
    }
}

fn expect(expected: WireType, actual: WireType) -> Result<(), WireProblem> {
    if expected == actual {
        Ok(())
    } else {
        Err(WireProblem::WireType { expected, actual })
    }
}
