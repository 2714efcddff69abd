//! Any bytes as a script of HTTP/2 frames (protocol errors included) and the byte boundaries
//! they are split at: the connection's frame follower finds every frame's end and allows a
//! GOAWAY only outside a frame and a header block, and the intake hands hyper every byte once,
//! each frame intact, control frames never moved into a header block.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    turnstile::server::fuzz_frames(data);
});
