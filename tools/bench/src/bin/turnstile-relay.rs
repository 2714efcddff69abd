//! A TCP relay on loopback that holds every chunk of the server's answers for a delay before
//! passing it on: a slow store for overload runs (this kernel has no netem).
//!
//! Usage: `turnstile-relay LISTEN_PORT TARGET_PORT DELAY_MS`

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen, target, delay] = args.as_slice() else {
        return Err("usage: turnstile-relay LISTEN_PORT TARGET_PORT DELAY_MS".into());
    };
    let (listen, target): (u16, u16) = (listen.parse()?, target.parse()?);
    let delay = Duration::from_millis(delay.parse()?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", listen)).await?;
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else {
                continue;
            };
            let (mut from_client, mut to_client) = client.into_split();
            let (mut from_server, mut to_server) = server.into_split();
            tokio::spawn(async move {
                let mut buf = vec![0; 64 * 1024];
                while let Ok(n) = from_client.read(&mut buf).await {
                    if n == 0 || to_server.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                let mut buf = vec![0; 64 * 1024];
                while let Ok(n) = from_server.read(&mut buf).await {
                    tokio::time::sleep(delay).await;
                    if n == 0 || to_client.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
        Ok::<(), std::io::Error>(())
    })?;
    Ok(())
}
