//! The tasks of HTTP/2 streams, as retryd spawns them for hyper: each can
//! be reset when its answer stalls past the point the answer could say so.
//!
//! A WatchHolds stream whose client takes nothing is ended with
//! RESOURCE_EXHAUSTED in its own body, but with the client's window at 0
//! hyper waits for window before it takes anything more from the body: the
//! end is never sent and the stream would live as long as its connection.
//! The stream's answer carries a [`StallAlarm`] (in its extensions); the
//! connection's service hands it to the stream's task ([`hand`]), and once
//! it is raised the task gives the body [`RESET_GRACE`] to end normally,
//! then drops the stream: h2 then sends RST_STREAM (CANCEL), which the
//! client sees at once (the frame needs no window), and the stream's
//! memory and its caller's watch seat are freed.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::service::stall::StallAlarm;

/// Time a stalled stream's body has to end by itself before it is reset.
pub const RESET_GRACE: Duration = Duration::from_secs(1);

thread_local! {
    /// The alarm handed over while a stream's task is being polled.
    static HANDED: Cell<Option<StallAlarm>> = const { Cell::new(None) };
}

/// Hands `alarm` to the stream task being polled on this thread (called
/// from the answer's future, which runs inside that task).
pub fn hand(alarm: StallAlarm) {
    HANDED.with(|h| h.set(Some(alarm)));
}

/// The executor given to hyper: spawns each HTTP/2 stream as a
/// [`StreamTask`] on tokio.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamExec;

impl<F> hyper::rt::Executor<F> for StreamExec
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        tokio::spawn(StreamTask {
            inner: fut,
            alarm: None,
        });
    }
}

pin_project_lite::pin_project! {
    /// One stream's task: ends early (dropping the stream) once an alarm
    /// handed to it is raised and the grace has passed.
    pub struct StreamTask<F> {
        #[pin]
        inner: F,
        alarm: Option<Box<Alarmed>>,
    }
}

/// An alarm handed to a stream, and the grace once it is raised.
struct Alarmed {
    alarm: StallAlarm,
    grace: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<F: Future<Output = ()>> Future for StreamTask<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        if let Some(a) = this.alarm.as_mut() {
            if a.expired(cx) {
                tracing::debug!("stalled stream reset (its end could not be sent)");
                return Poll::Ready(());
            }
        }
        // Whatever was handed while another task ran is not this stream's.
        HANDED.with(Cell::take);
        let polled = this.inner.poll(cx);
        if let Some(alarm) = HANDED.with(Cell::take) {
            if polled.is_pending() {
                let mut a = Box::new(Alarmed { alarm, grace: None });
                if a.expired(cx) {
                    return Poll::Ready(());
                }
                *this.alarm = Some(a);
            }
        }
        polled
    }
}

impl Alarmed {
    /// Whether the alarm was raised and its grace is over (registers `cx`
    /// for either otherwise).
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        if self.grace.is_none() {
            if !self.alarm.poll_raised(cx) {
                return false;
            }
            self.grace = Some(Box::pin(tokio::time::sleep(RESET_GRACE)));
        }
        self.grace.as_mut().is_some_and(|g| g.as_mut().poll(cx).is_ready())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_raised_alarm_ends_the_task_after_the_grace() {
        let alarm = StallAlarm::default();
        let handed = alarm.clone();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(StreamTask {
            inner: async move {
                hand(handed);
                std::future::pending::<()>().await;
                drop(done_tx);
            },
            alarm: None,
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!task.is_finished(), "not raised: the stream runs on");
        alarm.raise();
        tokio::time::sleep(RESET_GRACE / 4).await;
        assert!(!task.is_finished(), "within the grace");
        tokio::time::sleep(RESET_GRACE).await;
        assert!(task.is_finished(), "reset after the grace");
        assert!(done_rx.await.is_err(), "the stream was dropped, not finished");
    }
}
