//! Unit tests of `pipelined`.
#[tokio::test]
async fn replies_parse_and_absurd_lengths_are_refused() {
    use super::{Reply, read_reply};
    let mut input: &[u8] = b"VA 2 \r\n42\r\nNF\r\nMN\r\nVA 18446744073709551615\r\n";
    let (mut line, mut data) = (String::new(), Vec::new());
    let mut replies = Vec::new();
    for _ in 0..3 {
        let reply = read_reply(&mut input, &mut line, &mut data).await;
        replies.push(reply.expect("parsed").expect("a reply"));
    }
    assert_eq!(replies, [Reply::Value(42), Reply::NotFound, Reply::Noop]);
    let absurd = read_reply(&mut input, &mut line, &mut data).await;
    assert!(
        absurd.is_err(),
        "a claimed length beyond any counter is a broken stream"
    );
}

#[tokio::test]
async fn state_replies_parse() {
    use super::{Reply, read_reply};
    let mut input: &[u8] = b"VA 3 c99\r\n123\r\nEN\r\nHD\r\nEX\r\nNS\r\n";
    let (mut line, mut data) = (String::new(), Vec::new());
    let mut replies = Vec::new();
    for _ in 0..5 {
        let reply = read_reply(&mut input, &mut line, &mut data).await;
        replies.push(reply.expect("parsed").expect("a reply"));
    }
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
}
