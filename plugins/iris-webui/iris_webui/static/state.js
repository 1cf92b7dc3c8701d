/* The state of the open page: conversation, socket, runs and their turns, uploads. */

export var state = {
  session: null,          // the open conversation's id
  agent: "",              // "" = Iris itself, else a registered sub-agent's name
  agents: [],
  socket: null,
  socketSerial: 0,        // a socket's frames are ignored once a newer one replaced it
  ready: false,
  everReady: false,       // set by the first ready frame
  refused: null,          // an error code that makes this socket refuse messages
  backoff: 0,
  retryTimer: null,
  running: false,
  turn: null,             // the turn of frames without a run id (an older server)
  turns: {},              // run id -> its assistant turn
  activeRun: null,        // the run id in progress, if known
  doneRuns: {},           // run id -> true once its final reply came
  queuedItems: [],        // user bubbles waiting for a run, oldest first
  historyRunning: null,   // a history turn still running, until its run id is known
  refusals: 0,            // sockets closed before `ready`, in a row
  cards: {},              // tool call id -> card element (updated in place)
  subagents: {},          // sub-agent run id -> its card element (updated in place)
  serverSkew: 0,          // seconds the server's clock is ahead of ours (sub-agent runtimes)
  uploads: [],            // [{file, path, url, name, chip, state}]
  sessionsLoaded: []
};
