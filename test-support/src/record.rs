//! What the handlers saw.

use leasehold::Delivery;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Instant;

/// One delivery a handler saw.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The message's id.
    pub message_id: String,
    /// Its payload, as text.
    pub data: String,
    /// Its delivery attempt, when the subscription has a dead-letter policy.
    pub attempt: Option<u32>,
    /// When the handler saw it.
    pub at: Instant,
}

/// Everything handlers saw, shared between the handler and the test.
#[derive(Debug, Clone, Default)]
pub struct Record(Arc<Mutex<Vec<Seen>>>);

impl Record {
    /// Records a delivery whose payload is `data`.
    pub fn saw(&self, data: &str, delivery: &Delivery) {
        self.0.lock().push(Seen {
            message_id: delivery.message_id().to_string(),
            data: data.to_string(),
            attempt: delivery.delivery_attempt(),
            at: Instant::now(),
        });
    }
    /// Records a delivery of a text payload; returns the text.
    pub fn saw_payload(&self, data: &[u8], delivery: &Delivery) -> String {
        let text = String::from_utf8_lossy(data).into_owned();
        self.saw(&text, delivery);
        text
    }
    /// Every delivery seen so far, in order.
    pub fn all(&self) -> Vec<Seen> {
        self.0.lock().clone()
    }
    /// Deliveries of the message with payload `data`.
    pub fn of(&self, data: &str) -> Vec<Seen> {
        self.all().into_iter().filter(|s| s.data == data).collect()
    }
}
