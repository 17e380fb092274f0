//! Create a Bitrix24 deal under retryd's loop: a timeout after the write went
//! through is settled by a read-back by business key, never by a blind resend.
//!
//!     RETRYD_ADDR=127.0.0.1:50051 cargo run -p retryd-client --example deal_add
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retryd_client::{Call, Client, DependencyError, ReadBack};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("RETRYD_ADDR").unwrap_or_else(|_| "127.0.0.1:50051".into());
    let client = Client::builder(addr)
        .catalog("vibecode")
        .dependency("portal-7.bitrix24.eu")
        .tenant("acme")
        .connect()
        .await;
    // Stands in for a Bitrix24 REST client: the first add is applied, then its answer is lost.
    let deals: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let calls = Arc::new(Mutex::new(0));
    let add_deal = |origin_id: &'static str| {
        let (deals, calls) = (deals.clone(), calls.clone());
        async move {
            let mut d = deals.lock().unwrap();
            let n = d.len() + 1;
            let id = d
                .entry(origin_id.to_string())
                .or_insert_with(|| format!("deal-{n}"))
                .clone();
            *calls.lock().unwrap() += 1;
            if *calls.lock().unwrap() == 1 {
                Err(DependencyError::new("BITRIX_TIMEOUT"))
            } else {
                Ok(id)
            }
        }
    };
    let found = deals.clone();
    let call = Call::write("crm.deal.add")
        .read_back(move || {
            let id = found.lock().unwrap().get("order-1042").cloned();
            async move { id.map_or(ReadBack::Absent, ReadBack::Present) }
        })
        .timeout(Duration::from_secs(30));
    let deal_id = client.call(call, || add_deal("order-1042")).await?;
    client.close().await;
    assert_eq!((deals.lock().unwrap().len(), *calls.lock().unwrap()), (1, 1));
    println!("rust: {deal_id} created once, found by its read-back");
    Ok(())
}
