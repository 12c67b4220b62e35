use tokio::io::{duplex, AsyncReadExt as _, AsyncWriteExt as _, DuplexStream};
use tokio::sync::mpsc;

use super::*;
use crate::client::terminal::detach::DetachKey;
use crate::client::terminal::modes::{LEAVE_ALTERNATE_SCREEN, RESET_ON_DETACH};

/// What the fake session was told, in order.
#[derive(Debug, PartialEq, Eq)]
enum Told {
    Keys(Vec<u8>),
    Resize(u16, u16),
}

#[derive(Default)]
struct Session {
    told: Vec<Told>,
    refuse_keys: bool,
    resized: Option<mpsc::UnboundedSender<()>>,
}

impl KeySink for Session {
    async fn keys(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.refuse_keys {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        self.told.push(Told::Keys(bytes.to_vec()));
        Ok(())
    }

    async fn resize(&mut self, rows: u16, cols: u16) -> io::Result<()> {
        self.told.push(Told::Resize(rows, cols));
        if let Some(resized) = &self.resized {
            let _ = resized.send(());
        }
        Ok(())
    }
}

impl Session {
    fn keys(&self) -> Vec<u8> {
        let mut keys = Vec::new();
        for told in &self.told {
            if let Told::Keys(bytes) = told {
                keys.extend_from_slice(bytes);
            }
        }
        keys
    }
}

/// The client's ends, and the person's and program's other ends.
struct Wires {
    ends: Ends<DuplexStream, DuplexStream, DuplexStream>,
    keyboard: DuplexStream,
    screen: DuplexStream,
    program: DuplexStream,
}

fn wires(keyboard_room: usize, screen_room: usize) -> Wires {
    let (stdin, keyboard) = duplex(keyboard_room);
    let (stdout, screen) = duplex(screen_room);
    let (program_out, program) = duplex(4096);
    Wires {
        ends: Ends {
            stdin,
            stdout,
            program: program_out,
        },
        keyboard,
        screen,
        program,
    }
}

async fn read_all(mut from: DuplexStream) -> Vec<u8> {
    let mut bytes = Vec::new();
    from.read_to_end(&mut bytes).await.unwrap();
    bytes
}

fn default_scanner() -> DetachScanner {
    DetachScanner::new(&DetachKey::default())
}

#[tokio::test(flavor = "current_thread")]
async fn keys_reach_the_session_in_order_and_the_detach_key_never_does() {
    let Wires {
        ends,
        mut keyboard,
        screen,
        program: _program,
    } = wires(64, 4096);
    keyboard.write_all(b"ls\r").await.unwrap();
    keyboard.write_all(b"q\x1cafter").await.unwrap();
    let mut session = Session::default();
    let (_sizes_open, mut sizes) = mpsc::channel(1);
    let (ended, shown) = tokio::join!(
        passthrough(ends, &mut session, &mut sizes, default_scanner()),
        read_all(screen)
    );
    assert!(matches!(ended, Ended::Detached), "{ended:?}");
    assert_eq!(session.keys(), b"ls\rq");
    assert_eq!(shown, RESET_ON_DETACH);
}

#[tokio::test(flavor = "current_thread")]
async fn a_detach_from_a_full_screen_program_leaves_its_alternate_screen() {
    let Wires {
        ends,
        mut keyboard,
        screen,
        mut program,
    } = wires(64, 4096);
    let drawn = b"\x1b[?1049h\x1b[H\x1b[2J~\r\n~";
    let person = async move {
        program.write_all(drawn).await.unwrap();
        // The screen shown, then the detach key.
        let mut screen = screen;
        let mut shown = vec![0; drawn.len()];
        screen.read_exact(&mut shown).await.unwrap();
        keyboard.write_all(b"\x1c").await.unwrap();
        let rest = read_all(screen).await;
        (shown, rest, program)
    };
    let mut session = Session::default();
    let (_sizes_open, mut sizes) = mpsc::channel(1);
    let (ended, (shown, rest, _program)) = tokio::join!(
        passthrough(ends, &mut session, &mut sizes, default_scanner()),
        person
    );
    assert!(matches!(ended, Ended::Detached), "{ended:?}");
    assert_eq!(shown, drawn);
    assert_eq!(rest, [LEAVE_ALTERNATE_SCREEN, RESET_ON_DETACH].concat());
}

#[tokio::test(flavor = "current_thread")]
async fn a_two_key_detach_typed_one_byte_per_read_detaches() {
    // One byte of room: every read of the keyboard is one byte.
    let Wires {
        ends,
        mut keyboard,
        screen,
        program: _program,
    } = wires(1, 4096);
    let typed = async move {
        keyboard.write_all(b"a\x01\x01b\x01d").await.unwrap();
        keyboard
    };
    let mut session = Session::default();
    let (_sizes_open, mut sizes) = mpsc::channel(1);
    let scanner = DetachScanner::new(&DetachKey::parse("C-a d").unwrap());
    let (ended, _keyboard, _shown) = tokio::join!(
        passthrough(ends, &mut session, &mut sizes, scanner),
        typed,
        read_all(screen)
    );
    assert!(matches!(ended, Ended::Detached), "{ended:?}");
    assert_eq!(session.keys(), b"a\x01b");
}

#[tokio::test(flavor = "current_thread")]
async fn output_arrives_byte_for_byte_through_short_writes() {
    // Seven bytes of room: the screen takes each write in short pieces.
    let Wires {
        ends,
        keyboard: _keyboard,
        screen,
        mut program,
    } = wires(64, 7);
    let mut state = 0x2545_f491_u32;
    let sent: Vec<u8> = (0..70_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state.to_le_bytes()[0]
        })
        .collect();
    let writes = {
        let sent = sent.clone();
        async move {
            program.write_all(&sent).await.unwrap();
            drop(program);
        }
    };
    let mut session = Session::default();
    let (_sizes_open, mut sizes) = mpsc::channel(1);
    let (ended, (), shown) = tokio::join!(
        passthrough(ends, &mut session, &mut sizes, default_scanner()),
        writes,
        read_all(screen)
    );
    assert!(matches!(ended, Ended::OutputEnded), "{ended:?}");
    assert_eq!(shown.len(), sent.len());
    assert!(
        shown == sent,
        "the output differs from what the program wrote"
    );
    assert!(session.told.is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn window_sizes_reach_the_session() {
    let Wires {
        ends,
        keyboard,
        screen: _screen,
        program: _program,
    } = wires(64, 4096);
    let (resized, mut each_resize) = mpsc::unbounded_channel();
    let mut session = Session {
        resized: Some(resized),
        ..Session::default()
    };
    let (sizes_in, mut sizes) = mpsc::channel(4);
    let person = async move {
        sizes_in.send((30, 100)).await.unwrap();
        each_resize.recv().await.unwrap();
        sizes_in.send((31, 101)).await.unwrap();
        each_resize.recv().await.unwrap();
        drop(keyboard);
    };
    let (ended, ()) = tokio::join!(
        passthrough(ends, &mut session, &mut sizes, default_scanner()),
        person
    );
    assert!(matches!(ended, Ended::StdinClosed), "{ended:?}");
    assert_eq!(session.told, [Told::Resize(30, 100), Told::Resize(31, 101)]);
}

#[tokio::test(flavor = "current_thread")]
async fn a_closed_keyboard_ends_it_and_a_failing_session_is_named() {
    let Wires {
        ends,
        keyboard,
        screen: _screen,
        program: _program,
    } = wires(64, 4096);
    drop(keyboard);
    let mut session = Session::default();
    let (_sizes_open, mut sizes) = mpsc::channel(1);
    let ended = passthrough(ends, &mut session, &mut sizes, default_scanner()).await;
    assert!(matches!(ended, Ended::StdinClosed), "{ended:?}");
    assert!(session.told.is_empty());

    // A detach prefix typed last reaches the program when input ends.
    let Wires {
        ends,
        mut keyboard,
        screen: _screen,
        program: _program,
    } = wires(64, 4096);
    keyboard.write_all(b"x\x01").await.unwrap();
    drop(keyboard);
    let mut session = Session::default();
    let scanner = DetachScanner::new(&DetachKey::parse("C-a d").unwrap());
    let ended = passthrough(ends, &mut session, &mut sizes, scanner).await;
    assert!(matches!(ended, Ended::StdinClosed), "{ended:?}");
    assert_eq!(session.keys(), b"x\x01");

    let Wires {
        ends,
        mut keyboard,
        screen: _screen,
        program: _program,
    } = wires(64, 4096);
    keyboard.write_all(b"x").await.unwrap();
    let mut session = Session {
        refuse_keys: true,
        ..Session::default()
    };
    let ended = passthrough(ends, &mut session, &mut sizes, default_scanner()).await;
    let Ended::Failed(failure) = ended else {
        panic!("{ended:?}");
    };
    assert_eq!(failure.side, Side::Session);
    assert!(
        failure
            .to_string()
            .starts_with("writing to the session's terminal: "),
        "{failure}"
    );
}
