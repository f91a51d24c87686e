//! Scratch PostgreSQL databases for tests: [`TestDatabase::create`] makes a
//! new, empty database on the server `TEST_DATABASE_URL` names, and dropping
//! the guard drops the database again (`WITH (FORCE)`, so connections a test
//! left open do not keep it), so a test run leaves none behind. A failure to
//! drop is reported on stderr and otherwise ignored.

use sqlx::{Connection, Executor, PgConnection};

/// A database that lives as long as this guard.
#[derive(Debug)]
pub struct TestDatabase {
    url: String,
    admin_url: String,
    name: String,
}

impl TestDatabase {
    /// Creates `sb_test_<random>` on the server of `admin_url` (a
    /// `postgres://` URL of a database the user may connect to).
    ///
    /// # Panics
    /// The server cannot be reached or refuses to create the database.
    pub async fn create(admin_url: &str) -> Self {
        let name = format!("sb_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(admin_url)
            .await
            .expect("connect to TEST_DATABASE_URL");
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .expect("create the test database");
        let _ = admin.close().await;
        let mut url = url::Url::parse(admin_url).expect("TEST_DATABASE_URL is a URL");
        url.set_path(&name);
        Self {
            url: url.to_string(),
            admin_url: admin_url.to_owned(),
            name,
        }
    }

    /// The database's URL.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        // Drop may run on an async runtime's thread, where blocking on a
        // future is refused: a thread of its own, with its own runtime.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|err| err.to_string())?;
            runtime.block_on(async {
                let mut admin = PgConnection::connect(&admin_url)
                    .await
                    .map_err(|err| err.to_string())?;
                let dropped = admin
                    .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                    .await
                    .map(|_| ())
                    .map_err(|err| err.to_string());
                let _ = admin.close().await;
                dropped
            })
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(err)) => eprintln!("test database {} not dropped: {err}", self.name),
            Err(_) => eprintln!(
                "test database {} not dropped: the dropping thread panicked",
                self.name
            ),
        }
    }
}
