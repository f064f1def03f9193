;;; complete.el --- headless Emacs + eglot end-to-end test of fsm-complete  -*- lexical-binding: t -*-
;;
;;   FSM_PYTHON=python3 FSM_EMACS_CASE=case.py.in FSM_EMACS_OUT=/tmp/out.py \
;;     emacs --batch -l tests/emacs/complete.el
;;
;; Opens the case (its cursor is the first "<|>" marker, removed) in python-mode, starts
;; `FSM_PYTHON -m lsp_server' with eglot (built in from Emacs 29; on 28 the elpa-eglot package),
;; waits for the model with one textDocument/completion request, then completes at point the way a
;; user does (`completion-at-point', eglot's capf, which applies the item's textEdit), sends the
;; change, checks that the server's copy of the buffer (fsmComplete/documentText) equals Emacs's,
;; shuts the server down and writes the buffer to FSM_EMACS_OUT for the caller to parse. A JSON
;; report goes to FSM_EMACS_OUT.json. Exit status: 0 when every step passed, 1 when a check failed,
;; 2 when the setup failed.

(require 'package)
(package-initialize)                    ; Debian's elpa-eglot (Emacs 28) lives in the system package dirs
(require 'json)
(require 'python)

(defvar fsm-report (list (cons 'steps nil)))
(defvar fsm-out (getenv "FSM_EMACS_OUT"))
(defvar fsm-timeout (/ (string-to-number (or (getenv "FSM_EMACS_TIMEOUT_MS") "180000")) 1000.0))

(defun fsm-note (key value) (push (cons key value) fsm-report))

(defun fsm-step (name &optional detail)
  (setcdr (assq 'steps fsm-report) (append (cdr (assq 'steps fsm-report)) (list name)))
  (message "[emacs-e2e] %s%s" name (if detail (concat ": " detail) "")))

(defun fsm-finish (code &optional text)
  (fsm-note 'status code)
  (when text (fsm-note 'message text) (message "[emacs-e2e] %s" text))
  (when fsm-out
    (with-temp-file (concat fsm-out ".json")
      (insert (json-encode fsm-report))))
  (kill-emacs code))

(unless (require 'eglot nil t)
  (fsm-finish 2 (format "Emacs %s has no eglot: it is built in from Emacs 29; on Emacs 28 install the elpa-eglot package"
                        emacs-version)))

(condition-case err
    (let* ((python (or (getenv "FSM_PYTHON") "python3"))
           (root (file-name-as-directory (or (getenv "FSM_ROOT") default-directory)))
           (case-file (or (getenv "FSM_EMACS_CASE") (fsm-finish 2 "FSM_EMACS_CASE and FSM_EMACS_OUT must be set")))
           (text (with-temp-buffer (insert-file-contents case-file) (buffer-string)))
           (cursor (or (string-search "<|>" text) (fsm-finish 2 "the case has no <|> cursor marker")))
           (before (replace-regexp-in-string "<|>" "" text t t))
           (default-directory root)
           server)
      ;; the buffer: visiting FSM_EMACS_OUT (a file:// URI; the server never reads the disk)
      (set-buffer (find-file-noselect fsm-out))
      (erase-buffer)
      (insert before)
      (python-mode)
      (goto-char (1+ cursor))
      (fsm-step "buffer ready" (format "%d chars, cursor at %d" (buffer-size) (point)))
      ;; the server, as docs/editors.md configures it: the Python where fsm-complete is installed.
      ;; The project root below is this repository, whose test files hold this very case: no
      ;; workspace slice in the project context, so the completion is the model's and the buffer's.
      (setq eglot-server-programs
            `((python-mode . (,python "-m" "lsp_server"
                                      :initializationOptions (:generation (:maxTokens 24)
                                                              :context (:workspace :json-false))))))
      (setq eglot-connect-timeout fsm-timeout eglot-sync-connect t eglot-autoreconnect nil)
      (let ((project-find-functions (list (lambda (_dir) (cons 'transient root)))))
        (apply #'eglot (eglot--guess-contact)))
      (setq server (eglot-current-server))
      (unless server (fsm-finish 2 "eglot did not connect"))
      (fsm-step "server initialized" (format "%S" (eglot--server-info server)))
      ;; the first completion waits for the model to load: ask once with a long timeout
      (let* ((params (append (eglot--TextDocumentPositionParams) '(:context (:triggerKind 1))))
             (result (jsonrpc-request server :textDocument/completion params :timeout fsm-timeout))
             (items (if (vectorp result) result (plist-get result :items))))
        (fsm-note 'items (length items))
        (when (zerop (length items)) (fsm-finish 1 "textDocument/completion returned no item"))
        (fsm-step "model ready" (format "%S" (plist-get (aref items 0) :label))))
      ;; completion at point, eglot's own path (a sole candidate is inserted, its textEdit applied)
      (let ((completion-auto-help nil) (completion-cycle-threshold nil))
        (completion-at-point))
      (fsm-note 'after (buffer-string))
      (when (string= (buffer-string) before)
        (fsm-finish 1 "completion-at-point changed nothing"))
      (fsm-step "completed at point" (buffer-substring (line-beginning-position) (line-end-position)))
      (write-region nil nil fsm-out nil 'quiet)
      ;; the server's copy after eglot's didChange
      (eglot--signal-textDocument/didChange)
      (let* ((doc (jsonrpc-request server :fsmComplete/documentText
                                   (list :textDocument (eglot--TextDocumentIdentifier)) :timeout 30))
             (server-text (plist-get doc :text)))
        (unless (equal server-text (buffer-string))
          (fsm-note 'server_text server-text)
          (fsm-finish 1 "the server's copy of the buffer differs from Emacs's after the edit"))
        (fsm-step "server in sync" (format "version %S" (plist-get doc :version))))
      ;; shutdown + exit, waiting for the process (eglot-shutdown kills it after 1.5 s on 28): the
      ;; server's exit code shows a clean session
      (let ((process (jsonrpc--process server)))
        (setf (eglot--shutdown-requested server) t) ; as eglot-shutdown does: no reconnect
        (jsonrpc-request server :shutdown nil :timeout 30)
        (jsonrpc-notify server :exit nil)
        (with-timeout (30 (fsm-finish 1 "the server did not exit after shutdown"))
          (while (process-live-p process) (accept-process-output nil 0.05)))
        (fsm-note 'server_exit (process-exit-status process))
        (unless (zerop (process-exit-status process))
          (fsm-finish 1 (format "the server exited with %d" (process-exit-status process)))))
      (fsm-step "server shut down")
      (fsm-finish 0))
  (error (fsm-finish 2 (format "error: %S" err))))
