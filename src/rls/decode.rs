//! `ShouldRateLimit`'s request message read straight into a [`Draft`] whose domain, keys and
//! values borrow the message: no allocation for any of them (unless one is not UTF-8), one list
//! of entries per descriptor and one list of descriptors, and nothing converted afterwards.
//!
//! The layout read is `turnstile.wire.v1.LenientRequest` (`proto/turnstile/wire/v1/lenient.proto`:
//! Envoy's `RateLimitRequest` with the header-derived texts as bytes). Why not prost's generated
//! decoder for it: that gives every domain, key and value a `Vec<u8>` of its own and every list
//! a growing `Vec`, and the limiter's request is then built again from it — 2.33 us for five
//! descriptors of two entries against 0.82 us this way, 515 ns against 221 ns for one
//! (criterion, `cargo bench --bench hot_path -- "request from the wire"`, BENCHMARKS.md). Any
//! bytes decode here exactly as prost decodes them (the same fields, the same last-one-wins and
//! merging of repeated singular fields, the same refusals): `tests/it/wire_decode.rs` compares
//! the two on random and mutated messages, and so does the `request_protobuf` fuzz target.
//!
//! Must not touch: validation (`convert`), the protobuf wire format itself (`wire`).

use super::convert::{Draft, text};
use crate::grpc::wire::{Fields, RECURSION_LIMIT, WireProblem, WireType};
use crate::limiter::{Descriptor, Entry};

/// A request message that is not valid protobuf, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to decode Protobuf message: {field}{problem}")]
pub struct WireError {
    /// The field being read, e.g. `descriptors[1].entries[0].key: ` (empty at the top).
    field: String,
    /// What was wrong.
    problem: WireProblem,
}

impl WireError {
    fn at(field: &str) -> impl FnOnce(WireProblem) -> WireError + '_ {
        move |problem| WireError {
            field: if field.is_empty() {
                String::new()
            } else {
                format!("{field}: ")
            },
            problem,
        }
    }

    fn within(mut self, parent: std::fmt::Arguments<'_>) -> Self {
        self.field = if self.field.is_empty() {
            format!("{parent}: ")
        } else {
            format!("{parent}.{}", self.field)
        };
        self
    }
}

/// Decodes one request message (field numbers and types of `LenientRequest`).
pub fn decode_request(message: &[u8]) -> Result<Draft<'_>, WireError> {
    let mut domain: &[u8] = &[];
    let mut draft = Draft::default();
    each_field(message, RECURSION_LIMIT, |fields, field, wire_type| {
        match field {
            1 => {
                domain = fields
                    .delimited(wire_type)
                    .map_err(WireError::at("domain"))?
            }
            2 => {
                let i = draft.descriptors.len();
                let body = fields
                    .delimited(wire_type)
                    .map_err(WireError::at("descriptors"))?;
                let (descriptor, limit) =
                    descriptor(body).map_err(|e| e.within(format_args!("descriptors[{i}]")))?;
                draft.push(descriptor, limit);
            }
            // A uint32 keeps the varint's low 32 bits, as prost (and protobuf) decode it.
            3 => draft.hits_addend = varint(fields, wire_type, "hits_addend")? as u32,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    draft.domain = text(domain);
    Ok(draft)
}

/// Reads every field of one message: `known` takes the fields it knows (saying whether it
/// did); the others are skipped with `depth` left of prost's recursion budget.
fn each_field<'a>(
    message: &'a [u8],
    depth: u32,
    mut known: impl FnMut(&mut Fields<'a>, u32, WireType) -> Result<bool, WireError>,
) -> Result<(), WireError> {
    let mut fields = Fields::new(message);
    while !fields.is_done() {
        let (field, wire_type) = fields.key().map_err(WireError::at(""))?;
        if !known(&mut fields, field, wire_type)? {
            fields
                .skip(wire_type, field, depth)
                .map_err(WireError::at(""))?;
        }
    }
    Ok(())
}

/// A varint field's value, its name given when it is malformed.
fn varint(fields: &mut Fields<'_>, wire_type: WireType, name: &str) -> Result<u64, WireError> {
    fields.varint_field(wire_type).map_err(WireError::at(name))
}

/// A descriptor's `limit` as sent: requests per unit and the unit's number, checked later (a
/// bad unit is the request's error, not the wire's).
pub(super) type SentLimit = Option<(u32, i32)>;

/// One `LenientDescriptor` (its hits are resolved when the request is validated).
fn descriptor(body: &[u8]) -> Result<(Descriptor<'_>, SentLimit), WireError> {
    let mut descriptor = Descriptor {
        entries: Vec::new(),
        limit_override: None,
        hits: 0,
        refund: false,
        hits_addend: None,
    };
    let mut limit = None;
    // Fields inside a message nested in the request, as prost's recursion budget counts them.
    each_field(body, RECURSION_LIMIT - 1, |fields, field, wire_type| {
        match field {
            1 => {
                let j = descriptor.entries.len();
                let body = fields
                    .delimited(wire_type)
                    .map_err(WireError::at("entries"))?;
                let entry = entry(body).map_err(|e| e.within(format_args!("entries[{j}]")))?;
                descriptor.entries.push(entry);
            }
            // A singular message sent twice merges into the first, field by field.
            2 => {
                let body = fields
                    .delimited(wire_type)
                    .map_err(WireError::at("limit"))?;
                let (per_unit, unit) = limit.get_or_insert((0, 0));
                sent_limit(body, per_unit, unit).map_err(|e| e.within(format_args!("limit")))?;
            }
            3 => {
                let body = fields
                    .delimited(wire_type)
                    .map_err(WireError::at("hits_addend"))?;
                let value = descriptor.hits_addend.get_or_insert(0);
                wrapped_u64(body, value).map_err(|e| e.within(format_args!("hits_addend")))?;
            }
            4 => descriptor.refund = varint(fields, wire_type, "is_negative_hits")? != 0,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok((descriptor, limit))
}

/// What is left of prost's recursion budget inside a message two levels down.
const INNER_DEPTH: u32 = RECURSION_LIMIT - 2;

/// One entry: its key and value, each the last one sent.
fn entry(body: &[u8]) -> Result<Entry<'_>, WireError> {
    let (mut key, mut value): (&[u8], &[u8]) = (&[], &[]);
    each_field(body, INNER_DEPTH, |fields, field, wire_type| {
        match field {
            1 => key = fields.delimited(wire_type).map_err(WireError::at("key"))?,
            2 => {
                value = fields
                    .delimited(wire_type)
                    .map_err(WireError::at("value"))?
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(Entry {
        key: text(key),
        value: text(value),
    })
}

/// Merges a `RateLimitOverride` into what was sent before (a uint32 and an enum each keep the
/// varint's low 32 bits, as prost decodes them).
fn sent_limit(body: &[u8], per_unit: &mut u32, unit: &mut i32) -> Result<(), WireError> {
    each_field(body, INNER_DEPTH, |fields, field, wire_type| {
        match field {
            1 => *per_unit = varint(fields, wire_type, "requests_per_unit")? as u32,
            2 => *unit = varint(fields, wire_type, "unit")? as i32,
            _ => return Ok(false),
        }
        Ok(true)
    })
}

/// Merges a `google.protobuf.UInt64Value` into `value`.
fn wrapped_u64(body: &[u8], value: &mut u64) -> Result<(), WireError> {
    each_field(body, INNER_DEPTH, |fields, field, wire_type| {
        match field {
            1 => *value = varint(fields, wire_type, "value")?,
            _ => return Ok(false),
        }
        Ok(true)
    })
}
