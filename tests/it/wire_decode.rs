//! The server reads a `ShouldRateLimit` message with its own decoder (`rls::decode`, borrowing
//! the message's texts); any bytes must decode exactly as prost's generated decoder of the same
//! layout decodes them, to the same request or to a refusal (`wire_oracle`): random requests,
//! requests and descriptors sent in two parts (protobuf merges them), mutated and random bytes, and the wire
//! format's edges one by one.

use proptest::prelude::*;
use prost::Message;
use turnstile::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use turnstile::pb::turnstile::wire::v1::{LenientDescriptor, LenientRequest, lenient_descriptor};
use turnstile::rls::decode_request;

use crate::wire_oracle::check;

/// Bytes that are mostly short ASCII, sometimes empty or not UTF-8.
fn texts() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => proptest::collection::vec(b'a'..=b'e', 0..5),
        1 => proptest::collection::vec(any::<u8>(), 0..6),
    ]
}

fn descriptor() -> impl Strategy<Value = LenientDescriptor> {
    (
        proptest::collection::vec((texts(), texts()), 0..4),
        proptest::option::of((any::<u32>(), -2i32..10)),
        proptest::option::of(prop_oneof![Just(0u64), Just(1), any::<u64>()]),
        any::<bool>(),
    )
        .prop_map(
            |(entries, limit, hits_addend, is_negative_hits)| LenientDescriptor {
                entries: entries
                    .into_iter()
                    .map(|(key, value)| lenient_descriptor::Entry { key, value })
                    .collect(),
                limit: limit.map(|(requests_per_unit, unit)| RateLimitOverride {
                    requests_per_unit,
                    unit,
                }),
                hits_addend,
                is_negative_hits,
            },
        )
}

fn request() -> impl Strategy<Value = LenientRequest> {
    (
        texts(),
        proptest::collection::vec(descriptor(), 0..6),
        prop_oneof![Just(0u32), any::<u32>()],
    )
        .prop_map(|(domain, descriptors, hits_addend)| LenientRequest {
            domain,
            descriptors,
            hits_addend,
        })
}

/// One change to a message's bytes: a byte overwritten, a byte inserted, or the rest cut.
fn edit() -> impl Strategy<Value = (usize, u8, u8)> {
    (any::<usize>(), any::<u8>(), 0u8..3)
}

fn edited(mut bytes: Vec<u8>, edits: &[(usize, u8, u8)]) -> Vec<u8> {
    for &(at, byte, kind) in edits {
        let at = at % (bytes.len() + 1);
        match kind {
            0 if at < bytes.len() => bytes[at] = byte,
            1 => bytes.insert(at, byte),
            _ => bytes.truncate(at),
        }
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn any_request_decodes_as_prost_decodes_it(request in request()) {
        prop_assert_eq!(check(&request.encode_to_vec()), Ok(()));
    }

    #[test]
    fn a_request_sent_in_two_parts_merges_as_prost_merges_it(a in request(), b in request()) {
        let mut bytes = a.encode_to_vec();
        bytes.extend(b.encode_to_vec());
        prop_assert_eq!(check(&bytes), Ok(()));
    }

    #[test]
    fn a_descriptor_sent_in_two_parts_merges_as_prost_merges_it(
        domain in texts(),
        a in descriptor(),
        b in descriptor(),
    ) {
        let body = [a.encode_to_vec(), b.encode_to_vec()].concat();
        prop_assert_eq!(check(&[delimited(1, &domain), delimited(2, &body)].concat()), Ok(()));
    }

    #[test]
    fn mutated_requests_decode_or_fail_as_prost(
        request in request(),
        edits in proptest::collection::vec(edit(), 1..4),
    ) {
        prop_assert_eq!(check(&edited(request.encode_to_vec(), &edits)), Ok(()));
    }

    #[test]
    fn random_bytes_decode_or_fail_as_prost(bytes in proptest::collection::vec(any::<u8>(), 0..48)) {
        prop_assert_eq!(check(&bytes), Ok(()));
    }
}

fn varint(mut value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while value >= 0x80 {
        out.push((value as u8 & 0x7F) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
    out
}

fn key(field: u64, wire_type: u64) -> Vec<u8> {
    varint(field << 3 | wire_type)
}

fn delimited(field: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = key(field, 2);
    out.extend(varint(payload.len() as u64));
    out.extend_from_slice(payload);
    out
}

/// A valid request of one descriptor `k=v`, then `extra` inside that descriptor.
fn with_descriptor_extra(extra: &[u8]) -> Vec<u8> {
    let mut descriptor = delimited(1, &[delimited(1, b"k"), delimited(2, b"v")].concat());
    descriptor.extend_from_slice(extra);
    [delimited(1, b"d"), delimited(2, &descriptor)].concat()
}

/// Asserts that both decoders accept (or both refuse) `bytes`, and which.
fn agree(bytes: &[u8], accepted: bool) {
    assert_eq!(check(bytes), Ok(()));
    assert_eq!(decode_request(bytes).is_ok(), accepted, "{bytes:02x?}");
}

#[test]
fn unknown_fields_of_every_wire_type_are_skipped_at_every_level() {
    let unknown = [
        [key(9, 0), varint(u64::MAX)].concat(),
        [key(9, 1), vec![0; 8]].concat(),
        delimited(9, b"anything"),
        [key(9, 3), key(1, 0), varint(5), key(9, 4)].concat(),
        [key(9, 5), vec![0; 4]].concat(),
        [key(536_870_911, 0), varint(1)].concat(),
    ];
    for field in &unknown {
        agree(&[with_descriptor_extra(&[]), field.clone()].concat(), true);
        agree(&with_descriptor_extra(field), true);
        let entry = delimited(1, &[delimited(1, b"k"), field.clone()].concat());
        agree(&with_descriptor_extra(&entry), true);
    }
}

#[test]
fn the_wire_formats_refusals_are_prosts() {
    let valid = with_descriptor_extra(&[]);
    let refused = [
        // A ten-byte varint above 2^64, an eleven-byte one, one cut short.
        [key(3, 0), vec![0xFF; 9], vec![0x02]].concat(),
        [key(3, 0), vec![0x80; 10], vec![0x01]].concat(),
        [key(3, 0), vec![0x80]].concat(),
        // A key above 2^32, field 0, wire types 6 and 7.
        varint(1 << 32),
        key(0, 0),
        key(9, 6),
        key(9, 7),
        // A known field with another wire type; a length past the end.
        [key(1, 0), varint(1)].concat(),
        [key(2, 0), varint(1)].concat(),
        [key(1, 2), varint(5), b"ab".to_vec()].concat(),
        [key(9, 5), vec![0; 3]].concat(),
        // An end-group without its start, a group ended by another field's end.
        key(9, 4),
        [key(9, 3), key(8, 4)].concat(),
    ];
    for bytes in &refused {
        agree(&[valid.clone(), bytes.clone()].concat(), false);
    }
    // The largest ten-byte varint is 2^64 - 1.
    agree(
        &[valid.clone(), key(3, 0), vec![0xFF; 9], vec![0x01]].concat(),
        true,
    );
    // Inside a descriptor and an entry, the same refusals.
    agree(
        &with_descriptor_extra(&[key(4, 2), varint(0)].concat()),
        false,
    );
    agree(
        &with_descriptor_extra(&delimited(1, &[key(2, 0), varint(1)].concat())),
        false,
    );
}

#[test]
fn groups_nest_as_deep_as_prosts_recursion_limit() {
    let nested = |depth: usize| {
        let mut bytes = Vec::new();
        for _ in 0..depth {
            bytes.extend(key(9, 3));
        }
        for _ in 0..depth {
            bytes.extend(key(9, 4));
        }
        bytes
    };
    let valid = with_descriptor_extra(&[]);
    agree(&[valid.clone(), nested(100)].concat(), true);
    agree(&[valid.clone(), nested(101)].concat(), false);
    // One level down, one less.
    agree(&with_descriptor_extra(&nested(99)), true);
    agree(&with_descriptor_extra(&nested(100)), false);
}

#[test]
fn singular_fields_sent_twice_keep_the_last_and_messages_merge() {
    let limit = |fields: &[u8]| delimited(2, fields);
    // requests_per_unit from the first limit, unit from the second.
    let bytes = with_descriptor_extra(
        &[
            limit(&[key(1, 0), varint(7)].concat()),
            limit(&[key(2, 0), varint(2)].concat()),
        ]
        .concat(),
    );
    agree(&bytes, true);
    let request = decode_request(&bytes)
        .expect("decodes")
        .validate()
        .expect("valid");
    let sent = request.descriptors[0].limit_override.expect("a limit");
    assert_eq!(sent.requests_per_unit, 7);
    // An empty hits_addend wrapper is 0 (check only); the domain sent last wins.
    let bytes = [
        with_descriptor_extra(&delimited(3, &[])),
        delimited(1, b"e"),
    ]
    .concat();
    agree(&bytes, true);
    let request = decode_request(&bytes)
        .expect("decodes")
        .validate()
        .expect("valid");
    assert_eq!(
        (request.domain.as_ref(), request.descriptors[0].hits),
        ("e", 0)
    );
}
