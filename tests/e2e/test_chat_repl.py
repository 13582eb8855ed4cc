"""The chat REPL driven through a pseudo-terminal: the second turn processes
only its new tokens (the KV cache is kept), Ctrl-C at the prompt does not
quit, /reset clears the cache, /help lists the commands (not sent to the
model), /quit and Ctrl-D exit 0."""
import os
import pty
import re
import select
import signal
import subprocess
import time
import unittest

from common import INFERA, shared

MODEL = shared("models", "stories260K", "stories260K.gguf")
TURN = re.compile(r"\[turn (\d+): (\d+) new prompt tokens processed, (\d+) reused from the cache; (\d+) generated")


class Repl:
    def __init__(self, *args):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen([INFERA, "run", "--model", MODEL, *args], stdin=slave, stdout=slave,
                                     stderr=subprocess.PIPE, close_fds=True)
        os.close(slave)
        self.stderr = b""
        self.stdout = b""

    def pump(self, timeout):
        r, _, _ = select.select([self.master, self.proc.stderr], [], [], timeout)
        for fd in r:
            try:
                data = os.read(fd if isinstance(fd, int) else fd.fileno(), 65536)
            except OSError:
                data = b""
            if fd is self.proc.stderr:
                self.stderr += data
            else:
                self.stdout += data

    def wait_for_stderr(self, pattern, count, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = pattern.findall(self.stderr.decode(errors="replace"))
            if len(found) >= count:
                return found
            self.pump(0.2)
        raise AssertionError(f"timed out; stderr so far: {self.stderr.decode(errors='replace')}")

    def send(self, text):
        os.write(self.master, text.encode())

    def close(self):
        self.send("\x04")  # Ctrl-D at the start of a line: EOF
        deadline = time.time() + 30
        while self.proc.poll() is None and time.time() < deadline:
            self.pump(0.2)
        if self.proc.poll() is None:
            self.proc.kill()
        os.close(self.master)
        return self.proc.wait()


@unittest.skipUnless(os.path.exists(MODEL), "../shared not present")
class ChatReplTest(unittest.TestCase):
    def test_second_turn_reuses_the_cache(self):
        repl = Repl("-n", "24", "--temp", "0")
        try:
            repl.send("Once upon a time there was a dog.\n")
            t1 = repl.wait_for_stderr(TURN, 1)[0]
            repl.send("What did the dog do?\n")
            t2 = repl.wait_for_stderr(TURN, 2)[1]
        finally:
            rc = repl.close()
        processed1, reused1, generated1 = int(t1[1]), int(t1[2]), int(t1[3])
        processed2, reused2 = int(t2[1]), int(t2[2])
        self.assertEqual(reused1, 0)
        self.assertGreater(generated1, 0)
        # Everything fed in turn 1 (prompt + the generated tokens that were fed back) is reused ...
        self.assertGreaterEqual(reused2, processed1 + generated1 - 1)
        # ... and turn 2 processes only its own new text: "\nUser: What did the dog do?\nAssistant:"
        # (about 25 tokens in this 512-token vocabulary), not the 70+ token conversation.
        self.assertLessEqual(processed2, 30)
        self.assertLess(processed2, reused2)
        self.assertGreater(processed2, 3)
        self.assertEqual(rc, 0)
        self.assertIn("plain", repl.stderr.decode())  # no template in this model: plain fallback, with a warning

    def test_ctrl_c_at_prompt_and_reset(self):
        repl = Repl("-n", "8", "--temp", "0")
        try:
            repl.send("Hello.\n")
            repl.wait_for_stderr(TURN, 1)
            repl.proc.send_signal(signal.SIGINT)  # at the prompt: must not quit
            time.sleep(0.3)
            self.assertIsNone(repl.proc.poll())
            repl.send("/reset\n")
            repl.wait_for_stderr(re.compile(r"\[conversation cleared"), 1)
            repl.send("Hi again.\n")
            t2 = repl.wait_for_stderr(TURN, 2)[1]
            self.assertEqual(int(t2[2]), 0)  # nothing reused after /reset
        finally:
            rc = repl.close()
        self.assertEqual(rc, 0)

    def test_help_lists_the_commands_instead_of_asking_the_model(self):
        repl = Repl("-n", "8", "--temp", "0")
        try:
            repl.send("/help\n")
            repl.wait_for_stderr(re.compile(r"/exit, /quit"), 1)
            repl.send("/nonsense\n")
            repl.wait_for_stderr(re.compile(r"unknown command /nonsense"), 1)
            time.sleep(0.3)
            repl.pump(0.2)
            self.assertEqual(TURN.findall(repl.stderr.decode(errors="replace")), [])  # nothing went to the model
            self.assertIn("/system TEXT", repl.stderr.decode())
            repl.send("/quit\n")
            deadline = time.time() + 30
            while repl.proc.poll() is None and time.time() < deadline:
                repl.pump(0.2)
            self.assertEqual(repl.proc.poll(), 0)
        finally:
            rc = repl.close()
        self.assertEqual(rc, 0)


if __name__ == "__main__":
    unittest.main()
