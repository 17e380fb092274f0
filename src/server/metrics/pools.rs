//! What the gRPC wire's reuse pools keep (see `grpc::wire::pool` and
//! `grpc::wire::unary_pool`), read at each scrape and appended to the page:
//! `retryd_pooled_values{pool}` and `retryd_pooled_bytes{pool}`. Each pool
//! is bounded by constants (count and size per value); these show the bound
//! holding in a running server.

use std::fmt::Write as _;

/// Appends the two pool families to `page`.
pub fn render(page: &mut String) {
    let kept = crate::grpc::wire::pooled();
    let _ = write!(
        page,
        "# HELP retryd_pooled_values Values kept for reuse by a wire pool (bounded per pool).\n\
         # TYPE retryd_pooled_values gauge\n"
    );
    for (pool, k) in &kept {
        let _ = writeln!(page, "retryd_pooled_values{{pool=\"{pool}\"}} {}", k.values);
    }
    let _ = write!(
        page,
        "\n# HELP retryd_pooled_bytes Bytes held by the values a wire pool keeps, heap storage included.\n\
         # TYPE retryd_pooled_bytes gauge\n"
    );
    for (pool, k) in &kept {
        let _ = writeln!(page, "retryd_pooled_bytes{{pool=\"{pool}\"}} {}", k.bytes);
    }
    page.push('\n');
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_pool_is_on_the_page() {
        let mut page = String::new();
        super::render(&mut page);
        for pool in [
            "batch_requests",
            "batch_answers",
            "batch_views",
            "classify_failures",
            "classify_answers",
            "admit_requests",
        ] {
            assert!(
                page.contains(&format!("retryd_pooled_bytes{{pool=\"{pool}\"}} ")),
                "{page}"
            );
            assert!(
                page.contains(&format!("retryd_pooled_values{{pool=\"{pool}\"}} ")),
                "{page}"
            );
        }
    }
}
