//! One unary gRPC exchange on the wire: the request's one length-prefixed message read from
//! the HTTP/2 body (`read_request`), the answer written as one data frame and the
//! `grpc-status: 0` trailers (`respond`). It answers as tonic's unary handling does (the same
//! statuses and messages for a missing, truncated, oversized or compressed message; errors as
//! trailers-only responses), without its streaming codec; `tests/it/tonic_contract.rs` holds
//! it to a tonic server's answers.
//!
//! Why not tonic's `Grpc::unary`: it decodes through a streaming decoder (its own buffer, a
//! state machine per message) and encodes through a streaming encoder (a buffer, a stream of
//! one message, the trailers built from a `Status`), about 1.3 us of a call's ~12.5 us at
//! saturation on one memcached (perf, `scripts/bench.sh` shapes); a unary call needs neither
//! (BENCHMARKS.md, "A unary exchange without the streaming codec"). No compression: Envoy does
//! not compress rate-limit calls, and a compressed one is refused as tonic refuses it when none
//! is enabled.
//!
//! Must not touch: what the message means (the service's decoder and handler).

use std::pin::{Pin, pin};
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue};
use http_body::Frame;
use prost::Message;
use tonic::Status;
use tonic::body::Body;

/// The largest request message read (tonic's default for a server).
const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// A message's prefix: the compressed flag and the length (big-endian `u32`).
const PREFIX: usize = 5;

/// The request's message (an encoding refused before the body is read). Every message after
/// the first is read to its end and must pass `check`, the service's decoder, as tonic decodes
/// (and then drops) each one before it answers.
pub(crate) async fn read_request<B, C>(
    headers: &HeaderMap,
    body: B,
    check: C,
) -> Result<Bytes, Status>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    C: Fn(&[u8]) -> Result<(), Status>,
{
    uncompressed(headers)?;
    read_message(body, check).await
}

/// Refuses a request whose `grpc-encoding` names a compression (tonic's answer when none is
/// enabled).
fn uncompressed(headers: &HeaderMap) -> Result<(), Status> {
    match headers.get("grpc-encoding").map(HeaderValue::as_bytes) {
        None | Some(b"identity") => Ok(()),
        Some(other) => {
            let mut status = Status::unimplemented(format!(
                "Content is compressed with `{}` which isn't supported",
                String::from_utf8_lossy(other)
            ));
            status.metadata_mut().insert(
                "grpc-accept-encoding",
                tonic::metadata::MetadataValue::from_static("identity"),
            );
            Err(status)
        }
    }
}

/// Reads the body to its end and returns its first message (a unary request has one; each
/// that follows it is checked and dropped, as tonic does).
async fn read_message<B, C>(body: B, check: C) -> Result<Bytes, Status>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    C: Fn(&[u8]) -> Result<(), Status>,
{
    let mut body = pin!(body);
    let mut read = Received::default();
    let mut first = None;
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = match frame.map_err(|e| Status::from_error(e.into())) {
            Ok(frame) => frame,
            // A request the client cancelled ends there (as tonic reads it).
            Err(status) if status.code() == tonic::Code::Cancelled => break,
            Err(status) => return Err(status),
        };
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
        read.push(chunk);
        while let Some(message) = read.message()? {
            match first {
                None => first = Some(message),
                Some(_) => check(&message)?,
            }
        }
    }
    match (first, read.is_empty()) {
        (Some(message), true) => Ok(message),
        (None, true) => Err(Status::internal("Missing request message.")),
        (_, false) => Err(Status::internal("Unexpected EOF decoding stream.")),
    }
}

/// What has arrived of the messages not yet taken: the chunk as it came (most requests are
/// one), or the chunks joined.
#[derive(Default)]
struct Received {
    first: Bytes,
    joined: Option<BytesMut>,
}

impl Received {
    fn push(&mut self, chunk: Bytes) {
        match &mut self.joined {
            Some(joined) => joined.extend_from_slice(&chunk),
            None if self.first.is_empty() => self.first = chunk,
            None => {
                let mut joined = BytesMut::with_capacity(self.first.len() + chunk.len());
                joined.extend_from_slice(&self.first);
                joined.extend_from_slice(&chunk);
                self.joined = Some(joined);
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.first.is_empty() && self.joined.as_ref().is_none_or(|j| j.is_empty())
    }

    /// The next message, once all of it is here (what follows it kept); checks the prefix as
    /// soon as it is.
    fn message(&mut self) -> Result<Option<Bytes>, Status> {
        let bytes: &[u8] = self.joined.as_deref().unwrap_or(&self.first);
        let Some(&[flag, a, b, c, d]) = bytes.get(..PREFIX) else {
            return Ok(None);
        };
        match flag {
            0 => {}
            1 => {
                return Err(Status::internal(
                    "protocol error: received message with compressed-flag but no grpc-encoding \
                     was specified",
                ));
            }
            f => {
                return Err(Status::internal(format!(
                    "protocol error: received message with invalid compression flag: {f} (valid \
                     flags are 0 and 1), while sending request"
                )));
            }
        }
        let len = u32::from_be_bytes([a, b, c, d]) as usize;
        if len > MAX_MESSAGE_BYTES {
            return Err(Status::out_of_range(format!(
                "Error, decoded message length too large: found {len} bytes, the limit is: \
                 {MAX_MESSAGE_BYTES} bytes"
            )));
        }
        if bytes.len() < PREFIX + len {
            return Ok(None);
        }
        let mut whole = match self.joined.take() {
            Some(joined) => joined.freeze(),
            None => std::mem::take(&mut self.first),
        };
        let message = whole.slice(PREFIX..PREFIX + len);
        self.first = whole.split_off(PREFIX + len);
        Ok(Some(message))
    }
}

/// The answer to a call that succeeded: `content-type: application/grpc`, the message, and
/// `grpc-status: 0` in the trailers.
pub(crate) fn respond<M: Message>(message: &M) -> http::Response<Body> {
    let len = message.encoded_len();
    let mut data = BytesMut::with_capacity(PREFIX + len);
    data.put_u8(0);
    data.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    message.encode_raw(&mut data);
    let mut response = http::Response::new(Body::new(Answer {
        data: Some(data.freeze()),
        trailers: true,
    }));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    response
}

/// A unary answer's body: one data frame, then the trailers.
struct Answer {
    data: Option<Bytes>,
    trailers: bool,
}

impl http_body::Body for Answer {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if let Some(data) = this.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if std::mem::take(&mut this.trailers) {
            let mut trailers = HeaderMap::with_capacity(1);
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && !self.trailers
    }
}

#[cfg(test)]
mod tests;
