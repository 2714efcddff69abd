//! Unit tests of `unary`: reading a message however it is split, the refusals tonic gives, and
//! the answer's frames. (The exchange itself is tested on the wire: `tests/it/`.)
use http_body::Body as _;

use super::*;

/// A message of any service (this module knows none).
#[derive(Clone, PartialEq, prost::Message)]
struct Reply {
    #[prost(int32, tag = "1")]
    code: i32,
}

fn framed(flag: u8, message: &[u8]) -> Vec<u8> {
    let mut out = vec![flag];
    out.extend_from_slice(&u32::try_from(message.len()).expect("len").to_be_bytes());
    out.extend_from_slice(message);
    out
}

async fn read(chunks: &[&[u8]]) -> Result<Bytes, Status> {
    let frames = chunks
        .iter()
        .map(|c| Ok::<_, Status>(Frame::data(Bytes::copy_from_slice(c))));
    let body =
        http_body_util::StreamBody::new(futures_util::stream::iter(frames.collect::<Vec<_>>()));
    read_message(body, |_| Ok(())).await
}

#[tokio::test]
async fn a_message_is_read_however_its_bytes_are_split() {
    let whole = framed(0, b"hello world");
    assert_eq!(read(&[&whole]).await.expect("one chunk"), "hello world");
    for cut in 1..whole.len() {
        let (a, b) = whole.split_at(cut);
        assert_eq!(read(&[a, b]).await.expect("two chunks"), "hello world");
    }
    let bytes: Vec<&[u8]> = whole.chunks(1).collect();
    assert_eq!(read(&bytes).await.expect("a byte each"), "hello world");
    // What follows the message is read and dropped; an empty message is a message.
    let mut two = framed(0, b"first");
    two.extend(framed(0, b"second"));
    assert_eq!(read(&[&two]).await.expect("two messages"), "first");
    assert_eq!(read(&[&framed(0, b"")]).await.expect("empty"), "");
}

#[tokio::test]
async fn a_bad_body_gets_tonics_status() {
    let status = |r: Result<Bytes, Status>| {
        let s = r.expect_err("refused");
        (s.code(), s.message().to_owned())
    };
    let (code, message) = status(read(&[]).await);
    assert_eq!(
        (code, message.as_str()),
        (tonic::Code::Internal, "Missing request message.")
    );
    let cut = framed(0, b"hello");
    let (code, message) = status(read(&[&cut[..7]]).await);
    assert_eq!(
        (code, message.as_str()),
        (tonic::Code::Internal, "Unexpected EOF decoding stream.")
    );
    let (code, message) = status(read(&[&framed(1, b"x")]).await);
    assert_eq!(code, tonic::Code::Internal);
    assert!(message.contains("compressed-flag"), "{message}");
    let (code, message) = status(read(&[&framed(7, b"x")]).await);
    assert_eq!(code, tonic::Code::Internal);
    assert!(message.contains("invalid compression flag: 7"), "{message}");
    // The prefix alone names a message over the limit: refused before it arrives.
    let too_long = [0, 0x00, 0x40, 0x00, 0x01];
    let (code, message) = status(read(&[&too_long]).await);
    assert_eq!(code, tonic::Code::OutOfRange);
    assert!(message.contains("found 4194305 bytes"), "{message}");
}

#[test]
fn a_compressed_request_is_unimplemented_and_says_what_is_accepted() {
    let mut headers = HeaderMap::new();
    assert!(uncompressed(&headers).is_ok());
    headers.insert("grpc-encoding", HeaderValue::from_static("identity"));
    assert!(uncompressed(&headers).is_ok());
    headers.insert("grpc-encoding", HeaderValue::from_static("gzip"));
    let status = uncompressed(&headers).expect_err("gzip");
    assert_eq!(status.code(), tonic::Code::Unimplemented);
    assert_eq!(
        status
            .metadata()
            .get("grpc-accept-encoding")
            .map(|v| v.to_str().ok()),
        Some(Some("identity"))
    );
}

#[tokio::test]
async fn an_answer_is_its_message_then_grpc_status_0() {
    let message = Reply { code: 1 };
    let response = respond(&message);
    assert_eq!(
        response.headers().get(http::header::CONTENT_TYPE),
        Some(&HeaderValue::from_static("application/grpc"))
    );
    let mut body = pin!(response.into_body());
    let mut frames = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        frames.push(frame.expect("frame"));
    }
    let [data, trailers] = frames.as_slice() else {
        panic!("two frames: {frames:?}");
    };
    let data = data.data_ref().expect("data first");
    assert_eq!(data[..], framed(0, &message.encode_to_vec())[..]);
    let trailers = trailers.trailers_ref().expect("trailers last");
    assert_eq!(
        trailers.get("grpc-status"),
        Some(&HeaderValue::from_static("0"))
    );
}

/// Every message after the first is checked (tonic decodes each); the first is the answer.
#[tokio::test]
async fn messages_after_the_first_are_checked_and_dropped() {
    let (one, two) = (framed(0, b"first"), framed(0, b"second"));
    let body = [one.clone(), two.clone()].concat();
    let seen = std::sync::Mutex::new(Vec::new());
    let check = |m: &[u8]| {
        seen.lock().expect("seen").push(m.to_vec());
        Ok(())
    };
    let frames = vec![Ok::<_, Status>(Frame::data(Bytes::from(body)))];
    let read = read_message(
        http_body_util::StreamBody::new(futures_util::stream::iter(frames)),
        check,
    );
    assert_eq!(read.await.expect("first"), "first");
    assert_eq!(*seen.lock().expect("seen"), vec![b"second".to_vec()]);

    let refuse = |_: &[u8]| Err(Status::internal("not a request"));
    let frames = vec![
        Ok::<_, Status>(Frame::data(Bytes::from(one))),
        Ok(Frame::data(Bytes::from(two))),
    ];
    let read = read_message(
        http_body_util::StreamBody::new(futures_util::stream::iter(frames)),
        refuse,
    );
    assert_eq!(read.await.expect_err("refused").message(), "not a request");
}
