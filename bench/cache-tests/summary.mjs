// Grades a cache-tests results file as cache-tests.fyi does: required and optimal tests
// that pass; required tests that fail; optimal that fail; setup, harness and dependency
// failures. Run from the suite's directory: node summary.mjs results.json
import fs from 'fs'
import path from 'path'
import { pathToFileURL } from 'url'

const suiteDir = process.cwd()
const { default: suites } = await import(pathToFileURL(path.join(suiteDir, 'tests/index.mjs')))
const { determineTestResult, resultTypes } = await import(pathToFileURL(path.join(suiteDir, 'test-engine/lib/results.mjs')))
const results = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'))

const count = { pass: 0, fail: 0, optional_fail: 0, yes: 0, no: 0, other: 0, untested: 0 }
const failures = []
for (const suite of suites) {
  for (const test of suite.tests) {
    const r = determineTestResult(suites, test.id, results)
    const kind = test.kind || 'required'
    let name = Object.keys(resultTypes).find(k => resultTypes[k] === r)
    if (!(name in count)) name = 'other'
    count[name]++
    if (name === 'fail' || name === 'other' || name === 'optional_fail') {
      const detail = Array.isArray(results[test.id]) ? results[test.id].join(': ') : String(results[test.id])
      failures.push(`${name === 'fail' ? 'REQUIRED' : name === 'other' ? 'SETUP/HARNESS/DEP' : 'optimal'}\t${test.id}\t${detail}`)
    }
  }
}
failures.sort()
for (const f of failures) console.log(f)
console.log(`passed ${count.pass}, required failures ${count.fail}, optimal failures ${count.optional_fail}, ` +
  `setup/harness/dependency ${count.other}, checks yes ${count.yes} no ${count.no}`)
