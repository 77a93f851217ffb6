//! Several handlers on one path (h2o's sequence of handler blocks): each is asked in turn
//! until one answers.
//!
//! As in h2o, only the file handler passes a request on: when it finds no file (h2o's
//! handler declines on ENOENT and ENOTDIR, which spate's answers 404), and, as spate's file
//! handler refuses other methods before looking at the disk, for a method other than GET and
//! HEAD (so a POST reaches the application behind `file.dir`). The last handler's answer is
//! given whatever it is.

use crate::http::{Answer, Handler, Request, Response};

pub struct Chain {
    /// In the order written; two or more.
    links: Vec<Link>,
}

struct Link {
    handler: Box<dyn Handler>,
    /// A file handler: its 404 and 405 pass the request on.
    passes_on: bool,
}

impl Chain {
    /// `links`: each handler with whether it is a file handler.
    pub fn new(links: Vec<(Box<dyn Handler>, bool)>) -> Chain {
        Chain {
            links: links
                .into_iter()
                .map(|(handler, passes_on)| Link { handler, passes_on })
                .collect(),
        }
    }
}

fn passed_on(resp: &Response) -> bool {
    matches!(resp.status, 404 | 405)
}

impl Handler for Chain {
    fn handle(&self, req: &Request) -> Answer {
        let Some((last, first)) = self.links.split_last() else {
            return Answer::Now(Response::error(404));
        };
        for link in first {
            let answer = link.handler.handle(req);
            match answer {
                Answer::Now(resp) if link.passes_on && passed_on(&resp) => continue,
                answer => return answer,
            }
        }
        last.handler.handle(req)
    }

    fn streams_body(&self) -> bool {
        self.links.iter().any(|l| l.handler.streams_body())
    }

    fn tunnels(&self) -> bool {
        self.links.iter().any(|l| l.handler.tunnels())
    }

    fn answers_now(&self) -> bool {
        self.links.iter().all(|l| l.handler.answers_now())
    }
}
