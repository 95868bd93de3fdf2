//! The push envelope as the endpoint reads it: the first byte chooses the form, the rest is the
//! push. Even: the wrapped form (the rest is the JSON body). Odd: the unwrapped form (header
//! lines `name: value` up to an empty line, each taken as actix-web takes a header, then the
//! body). No panic, no allocation out of proportion to the input, and what is read is no more
//! than what came: a message id, a payload no longer than the body (wrapped: its base64 is in
//! the body; unwrapped: it is the body), attributes no larger than the input, an attempt above 0.

#![no_main]

use actix_web::http::header::{HeaderName, HeaderValue};
use leasehold_fuzz::{SUBSCRIPTION, bound, within};
use leasehold_push::fuzzing::{Read, unwrapped, wrapped};
use libfuzzer_sys::fuzz_target;

fn checked(read: &Read, input: &[u8]) {
    assert!(!read.message_id.is_empty());
    assert!(read.data_len <= input.len());
    assert!(read.attribute_bytes <= input.len());
    assert!(read.message_id.len() + read.ordering_key.len() <= input.len());
    assert_ne!(read.delivery_attempt, Some(0));
}

fuzz_target!(|input: &[u8]| {
    let Some((&form, push)) = input.split_first() else {
        return;
    };
    within(bound(input.len()), || {
        if form % 2 == 0 {
            if let Ok(read) = wrapped(push, SUBSCRIPTION) {
                checked(&read, push);
            }
            return;
        }
        let end = push
            .windows(2)
            .position(|w| w == b"\n\n")
            .unwrap_or(push.len());
        let body = push.get(end + 2..).unwrap_or_default();
        // Only what HTTP delivers: a header's name is a token, lower-cased, its value without
        // control characters (as actix-web's own `HeaderName` and `HeaderValue` take them).
        let lines: Vec<(HeaderName, HeaderValue)> = push[..end]
            .split(|&b| b == b'\n')
            .filter_map(|line| {
                let colon = line.iter().position(|&b| b == b':')?;
                let name = HeaderName::from_bytes(&line[..colon]).ok()?;
                let value = HeaderValue::from_bytes(line[colon + 1..].trim_ascii()).ok()?;
                Some((name, value))
            })
            .collect();
        let headers = lines.iter().map(|(n, v)| (n.as_str(), v.as_bytes()));
        if let Ok(read) = unwrapped(body, headers, SUBSCRIPTION) {
            assert_eq!(read.data_len, body.len());
            checked(&read, push);
        }
    });
});
