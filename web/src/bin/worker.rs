//! The training worker's entry point (a dedicated Web Worker, started by the page).

fn main() {
    tsa_web::run_constructors();
    tsa_web::worker::start();
}
