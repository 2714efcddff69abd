//! Unit tests of `reply`.
use super::{Reply, read_reply};

/// The first `n` replies of `input`, and what reading one more gives.
async fn read_n(mut input: &[u8], n: usize) -> (Vec<Reply>, std::io::Result<Option<Reply>>) {
    let (mut line, mut data) = (String::new(), Vec::new());
    let mut replies = Vec::new();
    for _ in 0..n {
        let reply = read_reply(&mut input, &mut line, &mut data).await;
        replies.push(reply.expect("parsed").expect("a reply"));
    }
    let next = read_reply(&mut input, &mut line, &mut data).await;
    (replies, next)
}

#[tokio::test]
async fn replies_parse_and_absurd_lengths_are_refused() {
    let input = b"VA 2 \r\n42\r\nNF\r\nMN\r\nVA 18446744073709551615\r\n";
    let (replies, absurd) = read_n(input, 3).await;
    assert_eq!(replies, [Reply::Value(42), Reply::NotFound, Reply::Noop]);
    assert!(
        absurd.is_err(),
        "a claimed length beyond any counter is a broken stream"
    );
}

#[tokio::test]
async fn state_replies_parse() {
    let (replies, end) = read_n(b"VA 3 c99\r\n123\r\nEN\r\nHD\r\nEX\r\nNS\r\n", 5).await;
    assert_eq!(
        replies,
        [
            Reply::State {
                value: 123,
                cas: 99
            },
            Reply::Miss,
            Reply::Stored,
            Reply::NotStored,
            Reply::NotStored
        ]
    );
    assert!(matches!(end, Ok(None)), "the end of the stream: {end:?}");
}

/// The general parser's answer to `input` and the bytes it leaves, read in one poll (an
/// in-memory reader never waits).
fn general(input: &[u8]) -> (Option<super::Reply>, usize) {
    use std::future::Future;
    let mut read = input;
    let (mut line, mut data) = (String::new(), Vec::new());
    let answer = {
        let mut reading = std::pin::pin!(async {
            line.clear();
            if tokio::io::AsyncBufReadExt::read_line(&mut read, &mut line).await? == 0 {
                return Ok(None);
            }
            super::parse(&line, &mut read, &mut data).await.map(Some)
        });
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match reading.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(Ok(reply)) => reply,
            _ => None,
        }
    };
    (answer, read.len())
}

#[test]
fn plain_replies_whole_in_the_buffer_are_read_in_place() {
    use super::{Reply, buffered_reply};
    let cases: [(&[u8], Reply, usize); 6] = [
        (b"VA 2 \r\n42\r\nNF\r\n", Reply::Value(42), 11),
        (b"VA 1\r\n7\r\n", Reply::Value(7), 9),
        (b"NF\r\nVA 1\r\n", Reply::NotFound, 4),
        (b"HD\r\n", Reply::Stored, 4),
        (b"EX\r\n", Reply::NotStored, 4),
        (
            b"VA 20 \r\n18446744073709551615\r\n",
            Reply::Value(u64::MAX),
            30,
        ),
    ];
    for (input, reply, used) in cases {
        assert_eq!(buffered_reply(input), Some((reply, used)), "{input:?}");
    }
    // Split across reads, with a CAS token, past u64, or not a number: the general parser's.
    for input in [
        &b"VA 2 \r\n4"[..],
        b"VA 2 \r\n42\r",
        b"VA 3 c99\r\n123\r\n",
        b"VA 20 \r\n18446744073709551616\r\n",
        b"VA 2 \r\n4x\r\n",
        b"VA 0 \r\n\r\n",
        b"CLIENT_ERROR bad command line format\r\n",
        b"",
    ] {
        assert_eq!(buffered_reply(input), None, "{input:?}");
    }
}

proptest::proptest! {
    /// Whatever the in-place path accepts, the general parser reads the same reply from, and
    /// leaves the same bytes after it.
    #[test]
    fn the_in_place_path_agrees_with_the_general_parser(
        head in proptest::sample::select(vec![
            "NF", "MN", "EN", "HD", "NS", "EX", "VA ", "VA  ", "VA 1", "VA 2", "VA 20", "VA 21",
            "VA 2 c7", "NF k", "va 2", "VA -1",
        ]),
        ending in proptest::sample::select(vec!["\r\n", "\n", " \r\n", "\t\r\n", "\r\r\n"]),
        body in proptest::collection::vec(
            proptest::sample::select(b"0123456789 \r\nx-".to_vec()), 0..30),
    ) {
        let mut input = format!("{head}{ending}").into_bytes();
        input.extend(body);
        if let Some((reply, used)) = super::buffered_reply(&input) {
            let (general, left) = general(&input);
            proptest::prop_assert_eq!(general, Some(reply));
            proptest::prop_assert_eq!(left, input.len() - used);
        }
    }
}
