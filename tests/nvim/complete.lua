-- Headless Neovim end-to-end test of fsm-complete with Neovim's built-in LSP client.
--
--   FSM_PYTHON=python3 FSM_NVIM_CASE=tests/nvim/case.py FSM_NVIM_OUT=/tmp/out.py \
--     nvim --headless --clean -n -i NONE -c 'luafile tests/nvim/complete.lua'
--
-- Opens the case file (its cursor is the first "<|>" marker, removed), starts `FSM_PYTHON -m
-- lsp_server` for the buffer, requests textDocument/completion at the cursor, applies the first
-- item's textEdit, checks that the server's copy of the buffer (fsmComplete/documentText) equals
-- Neovim's after the edit, and writes the buffer to FSM_NVIM_OUT for the caller to parse.
-- A JSON report goes to FSM_NVIM_OUT .. ".json". Exit status: 0 when every step passed, 1 when a
-- check failed, 2 when the setup failed. Works on Neovim 0.7 (Debian 12) and newer: vim.lsp.start
-- when it exists (0.8+), else vim.lsp.start_client + vim.lsp.buf_attach_client.

local python = os.getenv('FSM_PYTHON') or 'python3'
local case_path = os.getenv('FSM_NVIM_CASE')
local out_path = os.getenv('FSM_NVIM_OUT')
local root = os.getenv('FSM_ROOT') or (vim.uv or vim.loop).cwd()
local timeout_ms = tonumber(os.getenv('FSM_NVIM_TIMEOUT_MS') or '') or 180000
local MARKER = '<|>'

local report = { steps = {} }

local function log(message)
  io.stderr:write('[nvim-e2e] ' .. message .. '\n')
end

local function write_report()
  if out_path then
    local ok, encoded = pcall(vim.fn.json_encode, report)
    vim.fn.writefile({ ok and encoded or '{}' }, out_path .. '.json')
  end
end

local client_id

-- Client methods take self from Neovim 0.11 (client:stop()); before, they are closures (client.stop()).
local function call(client, method, ...)
  if vim.fn.has('nvim-0.11') == 1 then
    return client[method](client, ...)
  end
  return client[method](...)
end

local function finish(code, message)
  report.status = code
  report.message = message
  write_report()
  if message then
    log(message)
  end
  local client = client_id and vim.lsp.get_client_by_id(client_id)
  if client then
    -- shutdown + exit, so that the server's exit code shows a clean session
    call(client, 'stop')
    vim.wait(5000, function()
      return call(client, 'is_stopped')
    end, 20)
  end
  vim.cmd(code == 0 and 'qall!' or ('cquit ' .. code))
end

local function step(name, detail)
  table.insert(report.steps, name)
  log(name .. (detail and (': ' .. detail) or ''))
end

-- Runs `fn`; any Lua error is a setup failure (exit 2), with its traceback in the report.
local function guarded(fn)
  local ok, err = xpcall(fn, debug.traceback)
  if not ok then
    finish(2, 'error: ' .. tostring(err))
  end
end

guarded(function()
  if not case_path or not out_path then
    return finish(2, 'FSM_NVIM_CASE and FSM_NVIM_OUT must be set')
  end

  -- the buffer: the case file without its cursor marker
  local lines = vim.fn.readfile(case_path)
  local cursor
  for i, line in ipairs(lines) do
    local col = line:find(MARKER, 1, true)
    if col and not cursor then
      cursor = { i, col - 1 } -- (1-based line, 0-based byte column), as nvim_win_set_cursor takes it
      lines[i] = line:sub(1, col - 1) .. line:sub(col + #MARKER)
    end
  end
  if not cursor then
    return finish(2, case_path .. ' has no ' .. MARKER .. ' cursor marker')
  end
  vim.cmd('enew')
  local bufnr = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_name(bufnr, out_path) -- a file:// URI; the server never reads the disk
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, lines)
  vim.bo[bufnr].filetype = 'python'
  vim.api.nvim_win_set_cursor(0, cursor)
  report.before = lines
  step('buffer ready', string.format('%d lines, cursor %d:%d', #lines, cursor[1], cursor[2]))

  -- the server
  local initialized = false
  local config = {
    name = 'fsm-complete',
    cmd = { python, '-m', 'lsp_server' },
    cmd_cwd = root,
    root_dir = root,
    on_init = function()
      initialized = true
    end,
    on_exit = function(code)
      report.server_exit = code
    end,
  }
  if vim.lsp.start then
    client_id = vim.lsp.start(config, { bufnr = bufnr })
  else
    client_id = vim.lsp.start_client(config)
  end
  if not client_id then
    return finish(2, 'could not start ' .. python .. ' -m lsp_server')
  end
  if not vim.wait(timeout_ms, function()
    return initialized
  end, 20) then
    return finish(2, 'the server did not answer initialize within ' .. timeout_ms .. ' ms')
  end
  if not vim.lsp.start then
    vim.lsp.buf_attach_client(bufnr, client_id) -- sends didOpen now that the client is initialized
  end
  local client = vim.lsp.get_client_by_id(client_id)
  step('server initialized', 'position encoding ' .. tostring(client.offset_encoding))

  -- textDocument/completion at the cursor (it waits for the model to load)
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.context = { triggerKind = 1 } -- Invoked
  local responses, err = vim.lsp.buf_request_sync(bufnr, 'textDocument/completion', params, timeout_ms)
  if not responses then
    return finish(1, 'textDocument/completion failed: ' .. tostring(err))
  end
  local response = responses[client_id]
  if not response or response.err then
    return finish(1, 'textDocument/completion error: ' .. vim.inspect(response and response.err))
  end
  local result = response.result or {}
  local items = result.items or result
  report.items = items
  if type(items) ~= 'table' or #items == 0 then
    return finish(1, 'textDocument/completion returned no item at ' .. cursor[1] .. ':' .. cursor[2])
  end
  local item = items[1]
  step('completion', vim.inspect(item.textEdit and item.textEdit.newText or item.insertText or item.label))

  -- apply it as a completion plug-in would
  local edit = item.textEdit
  if edit and edit.insert then -- InsertReplaceEdit: insert mode
    edit = { range = edit.insert, newText = edit.newText }
  end
  if not edit then
    local pos = params.position
    edit = { range = { start = pos, ['end'] = pos }, newText = item.insertText or item.label }
  end
  vim.lsp.util.apply_text_edits({ edit }, bufnr, client.offset_encoding)
  local after = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  report.after = after
  vim.fn.writefile(after, out_path)
  if table.concat(after, '\n') == table.concat(lines, '\n') then
    return finish(1, 'applying the item changed nothing: ' .. vim.inspect(edit))
  end
  step('edit applied')

  -- the server's copy of the document after Neovim's didChange
  local docs = vim.lsp.buf_request_sync(bufnr, 'fsmComplete/documentText', {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
  }, 10000)
  local doc = docs and docs[client_id] and docs[client_id].result
  local expected = table.concat(after, '\n') .. '\n'
  if not doc or doc.text ~= expected then
    report.server_text = doc and doc.text
    return finish(1, 'the server\'s copy of the buffer differs from Neovim\'s after the edit')
  end
  step('server in sync', 'version ' .. tostring(doc.version))

  finish(0)
end)
