//! Secrets in connection strings, configuration files (valid or not) and object-store
//! settings never reach any output of the archiver, `--help` included.

use super::*;

/// The outputs of the archiver binary run with `args` and `env` (nothing else from the test's
/// environment that configures it), bounded: a run still going after 20 s is killed.
fn run_bounded(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(binary());
    cmd.args(args)
        .env_remove("PG_RETENTION_DATABASE_URL")
        .env_remove("PG_RETENTION_STORE")
        .env_remove("PG_RETENTION_CONFIG")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env("PG_RETENTION_CONNECT_TIMEOUT", "2s")
        .env("PG_RETENTION_REQUEST_TIMEOUT", "2s")
        .env("PG_RETENTION_MAX_RETRIES", "0")
        .env("PG_RETENTION_RETRY_TIMEOUT", "2s")
        .env("PG_RETENTION_METRICS_ADDR", "127.0.0.1:0")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start the archiver");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    child.wait_with_output().unwrap()
}

/// Every output that shows something of a secret, with what it showed: every secret in this
/// test holds `kret` (or is `se%6Bret`, "sekret" percent-encoded).
#[derive(Default)]
struct Leaks(Vec<String>);

impl Leaks {
    fn check(&mut self, what: &str, o: &Output) {
        let all = text(o);
        if ["kret", "%6Bret", "%6bret"].iter().any(|l| all.contains(l)) {
            self.0.push(format!("{what} shows a secret:\n{all}"));
        }
    }
}

#[test]
fn secrets_never_reach_output() {
    // A port nothing listens on: every connection fails.
    let port = pg_retention_integration::ports::free_ports(1)[0];
    let host = "127.0.0.1";
    let store_dir = scratch("pg-retention-secrets");
    let store = format!("file://{}", store_dir.display());
    let urls = [
        format!("postgres://u:sekret@{host}:{port}/db"),
        format!("postgresql://u:sekret@{host}:{port}/db?sslmode=disable"),
        format!("postgres://u@{host}:{port}/db?password=sekret"),
        format!("postgres://u@{host}:{port}/db?sslmode=disable&password=sekret&application_name=x"),
        format!("postgres://u@{host}:{port}/db?password=se%6Bret"),
        format!("postgres://u:se%20kret@{host}:{port}/db"),
        format!("postgres://u:pa@sekret@{host}:{port}/db"),
        format!("postgres://u:pa:sekret@{host}:{port}/db"),
        format!("postgres://u@{host}:{port}/db?sslpassword=sekret"),
        format!("host={host} port={port} user=u password=sekret dbname=db"),
        format!("host={host} port={port} user=u password='se kret' dbname=db"),
        format!("host={host} port={port} user=u password = sekret dbname=db"),
        format!("host={host} port={port} user=u password= 'se kret' dbname=db"),
        format!("host={host} port={port} user=u password =sekret dbname=db"),
        format!("host={host} port={port} user=u password='it\\'s sekret' dbname=db"),
        format!("host={host} port={port} user=u password=a\\ sekret dbname=db"),
        format!("host={host} port={port} user=u password=\"se kret\" dbname=db"),
        format!("host={host} port={port} user=u PASSWORD=sekret dbname=db"),
        format!("host={host} port={port} user=u sslpassword=sekret dbname=db"),
        format!("password=sekret host={host} port={port}"),
        format!("host={host} port={port} password sekret"),
        format!("host={host} port=notaport password=sekret"),
        format!("host={host}\nport={port}\npassword=sekret"),
    ];
    let conf_dir = scratch("pg-retention-secrets-conf");
    let mut leaks = Leaks::default();
    let mut configs = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        // Through the environment, the flag and (below) a configuration file.
        for args in [
            vec!["once"],
            vec!["verify", "--all"],
            vec!["sweep-orphans", "--older-than", "1h"],
            vec!["restore", "a/b.slice", "--into", "public.t"],
            vec![
                "expire",
                "status",
                "--operation-id",
                "00000000-0000-0000-0000-000000000000",
            ],
        ] {
            let o = run_bounded(
                &args,
                &[
                    ("PG_RETENTION_DATABASE_URL", url),
                    ("PG_RETENTION_STORE", &store),
                ],
            );
            assert!(
                !o.status.success(),
                "{url:?} {args:?} connects: {}",
                text(&o)
            );
            leaks.check(&format!("{args:?} with {url:?} in the environment"), &o);
        }
        let o = run_bounded(
            &["once", "--log-format", "json", "--database-url", url],
            &[("PG_RETENTION_STORE", &store), ("RUST_LOG", "trace")],
        );
        assert!(!o.status.success(), "{}", text(&o));
        leaks.check(&format!("once --database-url {url:?} (trace logs)"), &o);
        let o = run_bounded(
            &["run", "--database-url", url],
            &[("PG_RETENTION_STORE", &store), ("RUST_LOG", "debug")],
        );
        leaks.check(&format!("run --database-url {url:?}"), &o);
        // A valid configuration file holding it.
        let path = conf_dir.join(format!("ok-{i}.toml"));
        let toml_url = url
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        std::fs::write(
            &path,
            format!("database_url = \"{toml_url}\"\nstore = \"{store}\"\n"),
        )
        .unwrap();
        configs.push(path);
        // The connection string given where a command is expected: a usage error quotes it.
        let o = run_bounded(&[url.as_str()], &[]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        leaks.check(&format!("the command line {url:?}"), &o);
        let o = run_bounded(&["once", url.as_str()], &[]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        leaks.check(&format!("the command line once {url:?}"), &o);
    }
    for path in &configs {
        let o = run_bounded(&["once", "--config", &path.display().to_string()], &[]);
        assert!(!o.status.success(), "{}", text(&o));
        leaks.check(&format!("configuration file {}", path.display()), &o);
    }

    // Configuration files that do not parse, each holding a secret.
    let bad_files = [
        format!("database_url = \"postgres://u:sekret@{host}:{port}/db\"\nbatch_rows = \"many\"\n"),
        format!("database_url = \"postgres://u:sekret@{host}:{port}/db\n"),
        format!("database_url = postgres://u:sekret@{host}:{port}/db\n"),
        "database_url = 'host=h password='se kret''\n".to_owned(),
        "databse_url = \"host=h password='se kret'\"\n".to_owned(),
        "password = \"sekret\"\n".to_owned(),
        "[database_url]\npassword = \"sekret\"\n".to_owned(),
        "database_url = [\"postgres://u:sekret@h/db\"]\n".to_owned(),
        "database_url = { url = \"postgres://u:sekret@h/db\" }\n".to_owned(),
        "\"postgres://u:sekret@h/db\" = 1\n".to_owned(),
        "\"password=sekret\" = 1\n".to_owned(),
        "database_url = \"postgres://u@h/db\"\nsekret\n".to_owned(),
        "database_url = \"postgres://u@h/db\"\n\"sekret\"\n".to_owned(),
        "s3_secret_access_key = \"sekret\"\ns3_secret_access_key = \"sekret\"\n".to_owned(),
        "s3_secret_access_key = sekret\n".to_owned(),
        "store = \"s3://AKIA:sekret@bucket/p\"\nbatch_rows = 1.5\n".to_owned(),
        "database_url = \"\"\"\npostgres://u:sekret@h/db\"\"\"\nlease = 5\n".to_owned(),
    ];
    for (i, body) in bad_files.iter().enumerate() {
        let path = conf_dir.join(format!("bad-{i}.toml"));
        std::fs::write(&path, body).unwrap();
        let path = path.display().to_string();
        for args in [
            vec!["once", "--config", &path],
            vec!["ls", "--config", &path],
        ] {
            let o = run_bounded(&args, &[]);
            assert!(!o.status.success(), "{body:?}: {}", text(&o));
            leaks.check(&format!("a bad configuration file {body:?}"), &o);
        }
        let o = run_bounded(&["once"], &[("PG_RETENTION_CONFIG", &path)]);
        assert!(!o.status.success(), "{body:?}: {}", text(&o));
        leaks.check(&format!("PG_RETENTION_CONFIG={body:?}"), &o);
    }

    // Object-store secrets: in the store URL (refused), the endpoint's user info, the keys. At
    // the default log level: with RUST_LOG=debug, the HTTP client's own log lines (reqwest,
    // hyper-util) print an endpoint with its user info, which no redaction of ours reaches.
    let endpoint = format!("http://AKIA:sekret@{host}:{port}");
    for (args, env) in [
        (
            vec!["ls"],
            vec![("PG_RETENTION_STORE", "s3://AKIA:sekret@bucket/p".to_owned())],
        ),
        (
            vec!["ls"],
            vec![(
                "PG_RETENTION_STORE",
                "s3://bucket/p?secret_access_key=sekret".to_owned(),
            )],
        ),
        (
            vec!["ls"],
            vec![(
                "PG_RETENTION_STORE",
                "s3://bucket/p#token=sekret".to_owned(),
            )],
        ),
        (
            vec!["ls", "--s3-endpoint", endpoint.as_str()],
            vec![
                ("PG_RETENTION_STORE", "s3://bucket/p".to_owned()),
                ("AWS_ACCESS_KEY_ID", "AKIA".to_owned()),
                ("AWS_SECRET_ACCESS_KEY", "sekret".to_owned()),
            ],
        ),
        (
            vec![
                "verify",
                "--all",
                "--s3-secret-access-key",
                "sekret",
                "--s3-access-key-id",
                "AKIA",
            ],
            vec![
                ("PG_RETENTION_STORE", "s3://bucket/p".to_owned()),
                ("PG_RETENTION_S3_ENDPOINT", format!("http://{host}:{port}")),
            ],
        ),
        (
            vec!["ls"],
            vec![
                ("PG_RETENTION_STORE", "s3://bucket/p".to_owned()),
                ("AWS_ENDPOINT", endpoint.clone()),
                ("AWS_ALLOW_HTTP", "true".to_owned()),
                ("AWS_ACCESS_KEY_ID", "AKIA".to_owned()),
                ("AWS_SECRET_ACCESS_KEY", "sekret".to_owned()),
            ],
        ),
        (
            vec!["ls"],
            vec![
                ("PG_RETENTION_STORE", "s3://bucket/p".to_owned()),
                ("AWS_ENDPOINT", endpoint.clone()),
            ],
        ),
    ] {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let o = run_bounded(&args, &env);
        assert!(!o.status.success(), "{args:?} {env:?}: {}", text(&o));
        leaks.check(&format!("{args:?} with {env:?}"), &o);
    }

    // --help, of the binary and of every command, with every secret-bearing variable set.
    let env = [
        (
            "PG_RETENTION_DATABASE_URL",
            "postgres://u:sekret@h/db?password=sekret",
        ),
        ("PG_RETENTION_STORE", "s3://AKIA:sekret@bucket/p"),
        ("PG_RETENTION_S3_ENDPOINT", "https://u:sekret@s3.example"),
        ("AWS_ACCESS_KEY_ID", "AKIA-sekret"),
        ("AWS_SECRET_ACCESS_KEY", "sekret"),
    ];
    for args in [
        vec!["--help"],
        vec!["-h"],
        vec!["help"],
        vec!["--version"],
        vec!["once", "--help"],
        vec!["run", "--help"],
        vec!["restore", "--help"],
        vec!["sweep-orphans", "--help"],
        vec!["expire", "--help"],
        vec!["expire", "apply", "--help"],
        vec!["help", "verify"],
    ] {
        let o = run_bounded(&args, &env);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        leaks.check(&format!("{args:?}"), &o);
    }
    let _ = std::fs::remove_dir_all(store_dir);
    let _ = std::fs::remove_dir_all(conf_dir);
    assert!(
        leaks.0.is_empty(),
        "{} outputs show a secret:\n\n{}",
        leaks.0.len(),
        leaks.0.join("\n\n")
    );
}
