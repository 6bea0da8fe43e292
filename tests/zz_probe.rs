mod common;
use common::Scenario;
#[test]
fn probe() {
    let n: usize = std::env::var("P_N").unwrap().parse().unwrap();
    let mut sc = Scenario::new("incast", n + 1)
        .arg(&std::env::var("P_ARG").unwrap())
        .timeout(300);
    if let Ok(b) = std::env::var("P_CREDIT") {
        sc = sc.env("FI_GNIX_CREDIT_BYTES", &b);
    }
    let out = sc.run();
    for l in &out.info {
        eprintln!("{l}");
    }
}
