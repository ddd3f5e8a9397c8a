//! The page's entry point: mounts the app, which starts the training worker.

fn main() {
    tsa_web::run_constructors();
    tsa_web::page::start();
}
