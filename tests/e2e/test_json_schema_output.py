"""JSON-schema-constrained output (src/server/json_schema_grammar.cc): for
many schemas and seeds, every output of the bundled model validates against
its schema with a real JSON Schema validator (Debian's python3-jsonschema),
through OpenAI's response_format json_schema, llama.cpp's json_schema and
vLLM's guided_json; unsupported keywords are refused with their path."""
import json
import os
import sys
import unittest

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Server  # noqa: E402

NAME = {"type": "string", "minLength": 1, "maxLength": 12}
SCHEMAS = [
    {"type": "object", "properties": {"name": NAME, "age": {"type": "integer", "minimum": 0}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"type": "number"}}},
    {"type": "object", "properties": {"kind": {"enum": ["psalm", "proverb", 3, None]}, "verse": {"const": "amen"}},
     "required": ["kind", "verse"]},
    {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4},
    {"type": "object", "properties": {"tags": {"type": "array", "items": NAME, "maxItems": 3},
                                      "pair": {"type": "array", "prefixItems": [{"type": "string", "maxLength": 5},
                                                                                {"type": "integer"}],
                                               "minItems": 2, "items": False}},
     "required": ["pair"]},
    {"anyOf": [{"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
               {"type": "string", "maxLength": 10}]},
    {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                         "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                                  "maxItems": 1}},
                        "required": ["v"]}},
     "$ref": "#/$defs/node"},
    {"type": ["string", "null"], "maxLength": 8},
    {"type": "object", "properties": {"o1": NAME, "o2": {"type": "boolean"}, "r": {"type": "integer"},
                                      "o3": {"type": "null"}}, "required": ["r"]},
]


class JsonSchemaOutputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server("--max-num-seqs", "16")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def check(self, schema, text, finish, where):
        self.assertEqual(finish, "stop", (where, text))
        jsonschema.validate(json.loads(text), schema)

    def test_outputs_validate(self):
        n = 0
        for i, schema in enumerate(SCHEMAS):
            for seed in range(6):
                how = seed % 3
                if how == 0:
                    path = "/v1/chat/completions"
                    body = {"messages": [{"role": "user", "content": "Answer in JSON."}],
                            "response_format": {"type": "json_schema",
                                                "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}}}
                elif how == 1:
                    path, body = "/v1/completions", {"prompt": "JSON:", "json_schema": schema}
                else:
                    path, body = "/v1/completions", {"prompt": "JSON:", "guided_json": json.dumps(schema)}
                body.update(seed=seed, max_tokens=600, temperature=1.0)
                st, b = self.srv.json("POST", path, body)
                self.assertEqual(st, 200, (i, b))
                c = b["choices"][0]
                text = c["message"]["content"] if "message" in c else c["text"]
                self.check(schema, text, c["finish_reason"], (i, seed))
                n += 1
        self.assertEqual(n, 6 * len(SCHEMAS))

    def test_additional_properties(self):
        # Any number of extra members: the model may run to max_tokens, but
        # whatever ends validates, and whatever runs on stays valid so far.
        schema = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                  "additionalProperties": {"type": "string", "maxLength": 6}, "propertyNames": {"maxLength": 4}}
        for seed in range(6):
            st, b = self.srv.json("POST", "/v1/completions", {"prompt": "JSON:", "json_schema": schema, "seed": seed,
                                                              "max_tokens": 60, "temperature": 0.7})
            self.assertEqual(st, 200, b)
            c = b["choices"][0]
            self.assertTrue(c["text"].startswith('{ "id":') or c["text"].startswith('{"id":'), c["text"])
            if c["finish_reason"] == "stop":
                jsonschema.validate(json.loads(c["text"]), schema)

    def test_n_choices_and_streaming_validate(self):
        schema = SCHEMAS[0]
        st, b = self.srv.json("POST", "/v1/completions", {"prompt": "Who:", "json_schema": schema, "n": 4,
                                                          "seed": 11, "max_tokens": 200})
        self.assertEqual(st, 200, b)
        for c in b["choices"]:
            self.check(schema, c["text"], c["finish_reason"], "n")
        st, _, data = self.srv.request("POST", "/v1/completions", {"prompt": "Who:", "json_schema": schema,
                                                                   "stream": True, "seed": 2, "max_tokens": 200})
        text, finish = "", None
        for line in data.decode().splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for ch in json.loads(line[6:])["choices"]:
                    text += ch["text"]
                    finish = ch["finish_reason"] or finish
        self.check(schema, text, finish, "stream")

    def test_unsupported_keywords_are_refused_with_their_path(self):
        for schema, needle in (({"type": "string", "pattern": "^a"}, "keyword 'pattern'"),
                               ({"type": "object", "properties": {"x": {"type": "integer", "minimum": 5}}},
                                "#/properties/x: 'minimum' other than 0"),
                               ({"type": "string", "format": "date-time"}, "format 'date-time'"),
                               ({"$ref": "https://example.com/s.json"}, "not a local"),
                               ({"type": "integer", "multipleOf": 2}, "keyword 'multipleOf'")):
            st, b = self.srv.json("POST", "/v1/completions", {"prompt": "x", "json_schema": schema})
            self.assertEqual(st, 400, (schema, b))
            self.assertEqual(b["error"]["param"], "json_schema")
            self.assertIn(needle, b["error"]["message"])
        st, b = self.srv.json("POST", "/v1/completions", {"prompt": "x", "guided_json": "{not json"})
        self.assertEqual((st, b["error"]["param"]), (400, "guided_json"))


if __name__ == "__main__":
    unittest.main()
